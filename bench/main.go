// Command bench measures what kfsm costs against the controller you would
// write by hand: the same workload (a ConfigMap and a headless Service
// applied per object, then Ready) as a kfsm pipeline and as a plain
// controller-runtime reconciler, run against one embedded API server in
// interleaved rounds, each controller in a process of its own.
//
//	go run ./bench -n 1000,10000 -workers 1,8 -rounds 3
//
// For each run it reports the time until every object is Ready, the
// controller process's CPU time and peak RSS, its API requests per object
// by verb (checked against the API server's apiserver_request_total), and
// the requests per object that a restart over the converged objects
// makes. It then prints medians, spreads and the kfsm/hand ratios.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	var (
		ns       = flag.String("n", "1000", "numbers of objects, comma-separated")
		workers  = flag.String("workers", "1,8", "worker counts, comma-separated")
		rounds   = flag.Int("rounds", 3, "interleaved rounds per setting")
		impls    = flag.String("impl", "kfsm,hand", "implementations, comma-separated")
		crds     = flag.String("crds", "internal/testapi/crd", "the test API's CRDs")
		profiles = flag.String("cpuprofile", "", "a directory for the controller processes' CPU profiles")

		// The controller process.
		role       = flag.String("controller", "", "run as the controller process of this implementation")
		namespace  = flag.String("controller-namespace", "", "the controller's namespace")
		kubeconfig = flag.String("controller-kubeconfig", "", "the controller's kubeconfig")
		nworkers   = flag.Int("controller-workers", 1, "the controller's workers")
		profile    = flag.String("controller-cpuprofile", "", "the controller's CPU profile")
	)
	flag.Parse()
	if *role != "" {
		if err := controllerMain(*role, *namespace, *kubeconfig, *nworkers, *profile); err != nil {
			fmt.Fprintln(os.Stderr, "bench controller:", err)
			os.Exit(1)
		}
		return
	}
	plan, err := planOf(*ns, *workers, *impls, *rounds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	plan.crds, plan.profiles = *crds, *profiles
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := plan.run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// plan is what to measure.
type plan struct {
	sizes, workers []int
	impls          []string
	rounds         int
	crds, profiles string
}

func planOf(sizes, workers, impls string, rounds int) (*plan, error) {
	p := &plan{rounds: rounds, impls: strings.Split(impls, ",")}
	var err error
	if p.sizes, err = ints("-n", sizes); err != nil {
		return nil, err
	}
	if p.workers, err = ints("-workers", workers); err != nil {
		return nil, err
	}
	for _, impl := range p.impls {
		if impl != "kfsm" && impl != "hand" {
			return nil, fmt.Errorf("-impl: unknown implementation %q (kfsm, hand)", impl)
		}
	}
	if rounds < 1 {
		return nil, fmt.Errorf("-rounds must be at least 1, not %d", rounds)
	}
	return p, nil
}

func ints(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}
