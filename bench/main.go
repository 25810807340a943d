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
// the controller's CPU time and peak RSS at that moment, and the CPU time
// it had spent when its cache had listed the Gadgets and their children's
// kinds (the start-up, shown apart so that the CPU per object after it is
// the work of the reconciles). Then it counts the controller's API
// requests per object, by verb, in three phases:
//
//   - converge: from the start until all are Ready and the controller has
//     been quiet for 2 s, checked against the API server's own
//     apiserver_request_total;
//   - resync: every Gadget is reconciled again with nothing changed, by
//     the update event that a cache resync sends, replayed on demand;
//   - restart: a new controller process over the converged objects.
//
// Then it prints medians, spreads and the kfsm/hand ratios.
//
// -impl hand-full adds a third controller: the hand-written one made to
// keep the same data as kfsm, its labels on each child and a status of the
// same shape, with a cache that keeps no managed fields, as kfsm's does
// (fsm.LeanCache). It is a yardstick, not a rival: the kfsm/hand-full ratios
// are what the framework's own machinery costs, without the data it keeps
// on every object.
//
//	go run ./bench -impl kfsm,hand,hand-full -n 1000
//
// Every controller logs as one runs in production, with
// controller-runtime's zap logger out of development mode: JSON lines from
// the info level up, sampled, to a file of its own (kept with -logs DIR,
// named as the profiles are, with .log).
//
// With -cpuprofile DIR the controller processes write CPU and heap
// profiles there, named by implementation, N, workers and round: NAME.prof,
// NAME.peak.heap near the largest live heap until the peak RSS is read,
// and NAME.heap when the process stops.
//
// With -replicas it measures kfsm's sharded machines instead, and kfsm
// only: R replicas of the kfsm controller share one machine's Gadgets,
// each reconciling the hash slots it holds (see fsm.NewShards).
//
//	go run ./bench -replicas 1,2,3 -n 3000 -rounds 3
//
// The API server runs with the feature gate ShardedListAndWatch, so that
// each replica's cache lists and watches only its slice. In each round,
// for each R in turn, a run creates N Gadgets in a fresh namespace and
// starts R controller processes at once, each with an identity of its own
// and no leader election. It measures the time until every Gadget is
// Ready and, at that moment, the CPU time of all the processes together
// and of the busiest one, the largest peak RSS, and how many distinct
// Gadgets each process's cache decoded, as a cache transform counts them.
// Then it prints medians, spreads and the ratios to R=1. On a machine of
// few CPUs, shared with the API server and etcd, more replicas than CPUs
// cannot add throughput.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
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
	replicas       []int // of the sharded mode; none otherwise
	rounds         int
	crds           string
	profiles       string        // a directory, or empty
	logs           string        // a directory, or empty for a temporary one
	timeout        time.Duration // per phase
}

func parsePlan(args []string) (*plan, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	sizes := fs.String("n", "1000", "numbers of objects, comma-separated")
	workers := fs.String("workers", "1,8", "worker counts, comma-separated")
	impls := fs.String("impl", "kfsm,hand", "implementations, comma-separated: kfsm, hand, hand-full")
	replicas := fs.String("replicas", "", "numbers of sharded kfsm replicas, comma-separated: measures kfsm's sharded machines instead of kfsm against hand")
	p := &plan{}
	fs.IntVar(&p.rounds, "rounds", 3, "interleaved rounds per setting")
	fs.StringVar(&p.crds, "crds", "internal/testapi/crd", "the directory of the test API's CRDs")
	fs.StringVar(&p.profiles, "cpuprofile", "", "a directory for the controller processes' CPU and heap profiles")
	fs.StringVar(&p.logs, "logs", "", "a directory to keep the controller processes' logs in (by default they are removed)")
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
	if *replicas != "" {
		if p.replicas, err = positiveInts("-replicas", *replicas); err != nil {
			return nil, err
		}
		if !slices.Equal(p.impls, []string{"kfsm"}) && flagSet(fs, "impl") {
			return nil, errors.New("-replicas measures kfsm alone: leave -impl out")
		}
		p.impls = []string{"kfsm"}
	}
	if p.rounds < 1 {
		return nil, fmt.Errorf("-rounds must be at least 1, not %d", p.rounds)
	}
	if p.timeout <= 0 {
		return nil, fmt.Errorf("-timeout must be positive, not %s", p.timeout)
	}
	return p, nil
}

// flagSet says whether the command line set a flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
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
			return nil, fmt.Errorf("-impl: unknown implementation %q (kfsm, hand, hand-full)", impl)
		}
		out = append(out, impl)
	}
	return out, nil
}
