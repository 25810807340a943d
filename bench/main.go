// Command bench measures what kfsm costs against the controller you would
// write by hand: the same workload (a ConfigMap and a headless Service
// applied per object, then Ready) as a kfsm pipeline and as a plain
// controller-runtime reconciler, run against one embedded API server in
// interleaved rounds, each controller in an OS process of its own.
//
//	go run ./bench -n 1000,10000 -workers 1,8 -rounds 3
//
// Each run creates N Gadgets in a fresh namespace and starts a controller
// process over them. It measures the time until every Gadget is Ready and
// the controller's CPU time and peak RSS at that moment, then counts the
// controller's API requests per object, by verb, in three phases:
//
//   - converge: from the start until all are Ready and the controller has
//     been quiet for 2 s, checked against the API server's own
//     apiserver_request_total;
//   - resync: every Gadget is reconciled again with nothing changed, by
//     the update event that a cache resync sends, replayed on demand;
//   - restart: a new controller process over the converged objects.
//
// Then it prints medians, spreads and the kfsm/hand ratios. With
// -cpuprofile DIR the controller processes write CPU and heap profiles
// there, named by implementation, N, workers and round.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// controllerFlag, as the first argument, makes the program the controller
// process that the driver starts; its flags are not the user's.
const controllerFlag = "-controller"

func main() {
	if len(os.Args) > 1 && os.Args[1] == controllerFlag {
		if err := controllerMain(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench controller:", err)
			os.Exit(1)
		}
		return
	}
	p, err := parsePlan(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := p.run(ctx, os.Stdout); err != nil {
		stop()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// plan is what to measure.
type plan struct {
	sizes, workers []int
	impls          []string
	rounds         int
	crds           string
	profiles       string        // a directory, or empty
	timeout        time.Duration // per phase
}

func parsePlan(args []string) (*plan, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	sizes := fs.String("n", "1000", "numbers of objects, comma-separated")
	workers := fs.String("workers", "1,8", "worker counts, comma-separated")
	impls := fs.String("impl", "kfsm,hand", "implementations, comma-separated: kfsm, hand")
	p := &plan{}
	fs.IntVar(&p.rounds, "rounds", 3, "interleaved rounds per setting")
	fs.StringVar(&p.crds, "crds", "internal/testapi/crd", "the directory of the test API's CRDs")
	fs.StringVar(&p.profiles, "cpuprofile", "", "a directory for the controller processes' CPU and heap profiles")
	fs.DurationVar(&p.timeout, "timeout", 15*time.Minute, "how long each phase of a run may take")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	var err error
	if p.sizes, err = positiveInts("-n", *sizes); err != nil {
		return nil, err
	}
	if p.workers, err = positiveInts("-workers", *workers); err != nil {
		return nil, err
	}
	if p.impls, err = implementations(*impls); err != nil {
		return nil, err
	}
	if p.rounds < 1 {
		return nil, fmt.Errorf("-rounds must be at least 1, not %d", p.rounds)
	}
	if p.timeout <= 0 {
		return nil, fmt.Errorf("-timeout must be positive, not %s", p.timeout)
	}
	return p, nil
}

func positiveInts(name, s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func implementations(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		impl := strings.TrimSpace(f)
		if _, ok := setups[impl]; !ok {
			return nil, fmt.Errorf("-impl: unknown implementation %q (kfsm, hand)", impl)
		}
		out = append(out, impl)
	}
	return out, nil
}
