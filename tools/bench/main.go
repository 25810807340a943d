// Command bench measures what kfsm costs against the controller you would
// write by hand: the same workload (a ConfigMap and a headless Service
// applied per object, then Ready) as a kfsm pipeline and as a plain
// controller-runtime reconciler, run against one embedded API server in
// interleaved rounds, each controller in an OS process of its own.
//
//	go run ./tools/bench -n 1000,10000 -workers 1,8 -rounds 3
//
// Each run creates N Gadgets in a fresh namespace and starts a controller
// process over them. It measures the time until every Gadget is Ready and
// the controller's CPU time and peak RSS at that moment, and the CPU time
// it had spent when its cache had listed the Gadgets and their children's
// kinds (the start-up, shown apart so that the CPU per object after it is
// the work of the reconciles). Once the controller is quiet, it reads
// the controller's live heap after a forced collection; the median's
// growth from one -n to the next, over the objects added, is what the
// controller keeps per object, its fixed cost left out. It counts the
// controller's API requests per object, by verb, in three phases:
//
//   - converge: from the start until all are Ready and the controller has
//     been quiet for 2 s, checked against the API server's own
//     apiserver_request_total;
//   - resync: every Gadget is reconciled again with nothing changed, by
//     the update event that a cache resync sends, replayed on demand;
//   - restart: a new controller process over the converged objects.
//
// Between the resync and the restart, the controller process that
// converged stays on, and the driver changes the Gadgets' spec.target by
// merge patches, in two more phases:
//
//   - single changes (-changes, 50 by default): one Gadget at a time,
//     distinct Gadgets spread evenly over the N (every N/changes-th), each
//     written once the controller has made no request and finished no
//     reconcile for 300 ms. Each change is timed from just before the
//     driver's write until the driver's watch first shows that Gadget
//     Ready with status.observedGeneration and the Ready condition's
//     observedGeneration both at the generation that the write made. Of
//     these times it prints the p50, the p99 and the largest; the
//     percentiles are by nearest rank, so with fewer than 100 changes the
//     p99 is the largest.
//   - churn (-churn-rate changes a second for -churn-for, 50 for 60 s by
//     default): rate × duration changes, round-robin over the N Gadgets,
//     each handed at a tick of a ticker to one of 4 concurrent writers.
//     When all four are busy the ticker drops ticks, so that a stream that
//     falls behind is slower rather than bunched; the achieved rate printed
//     is the changes divided by the time from the ticker's start until the
//     last write returned. Then the driver waits until every changed
//     Gadget is Ready at its newest generation, as above, and the
//     controller has been quiet for 2 s. The CPU per change is the
//     controller's CPU time from its report just before the first write
//     (once it had been quiet for 300 ms) to its report at that quiet
//     moment, divided by the changes: it covers all the process did
//     meanwhile, its reconciles, its cache's watch events, its logging,
//     its garbage collection, and the 2 s of quiet. The requests per
//     change, by verb, are counted over the same span.
//
// -changes 0 and -churn-for 0 skip either. The restart then starts over
// Gadgets that these phases changed, all Ready at their newest generation.
//
// Each run also sets the controller's time to Ready beside the API
// server's floor: how long the API server alone takes for the writes
// that the controller made to converge (from its own counts, Events
// included), at the rate at which it created the run's Gadgets just
// before, from as many writers as the controller has workers: the API
// server's rate at the controller's concurrency. That rate is of one kind
// of write; it moves with the machine's load, and so does the floor.
// Before the first run, the driver creates and deletes a batch of Gadgets,
// so that the API server's first writes of its life, which are slower,
// measure no run.
//
// Then it prints medians, spreads and the kfsm/hand ratios.
//
// hand is the hand-written controller with the two filters that a careful
// engineer adds: the Gadgets' watch passes changes of the generation, the
// annotations or the labels only, and the children's watches drop their
// create events; a status conflict is requeued; and its cache keeps no
// managed fields (controller-runtime's transform), as kfsm's keeps none.
// -impl hand-unfiltered adds the same controller without the filters and
// with the default cache, as it is often written.
//
// -impl hand-full adds the filtered hand-written controller made to
// keep the same data as kfsm, its labels on each child and a status of the
// same shape, with a cache that keeps no managed fields, as kfsm's does
// (fsm.LeanCache). It is a yardstick, not a rival: the kfsm/hand-full ratios
// are what the framework's own machinery costs, without the data it keeps
// on every object.
//
//	go run ./tools/bench -impl kfsm,hand,hand-unfiltered,hand-full -n 1000
//
// Every controller logs as one runs in production, with
// controller-runtime's zap logger out of development mode: JSON lines from
// the info level up, sampled, to a file of its own (kept with -logs DIR,
// named as the profiles are, with .log).
//
// With -cpuprofile DIR the controller processes write CPU and heap
// profiles there, named by implementation, N, workers and round: NAME.prof,
// NAME.peak.heap near the largest live heap until the peak RSS is read,
// NAME.live.heap with the live heap once quiet, and NAME.heap when the
// process stops.
//
// With -replicas it measures kfsm's sharded machines instead, and kfsm
// only: R replicas of the kfsm controller share one machine's Gadgets,
// each reconciling the hash slots it holds (see sharding.New).
//
//	go run ./tools/bench -replicas 1,2,3 -n 3000 -rounds 3
//
// The API server runs with the feature gate ShardedListAndWatch, so that
// each replica's cache lists and watches only its slice. In each round,
// for each R in turn, a run creates N Gadgets in a fresh namespace and
// starts R controller processes at once, each with an identity of its own
// and no leader election. It measures the time until every Gadget is
// Ready and, at that moment, the CPU time of all the processes together
// and of the busiest one, the largest peak RSS, and how many distinct
// Gadgets each process's cache decoded, as a cache transform counts them,
// and how evenly the replicas share the Gadgets, the CPU and the memory.
//
// With more than one replica, a run then measures a hand-over: once every
// replica has been quiet for 2 s (their Leases' renewals aside), it kills
// the last one (SIGKILL) and waits until the others have reconciled each
// of its Gadgets again and are quiet. Each replica logs every walk of the
// machine (a Walk observer: the Gadget's UID, when the walk began and
// ended); the driver reads the logs as an outside recorder and prints the
// time from the kill until the last of the killed replica's Gadgets was
// reconciled by another (and the median), the Gadgets that two replicas
// ever reconciled at once (their walks overlap), and the requests that
// the others made meanwhile: writes and reads per Gadget moved, and their
// Leases'.
//
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
	// changes is the number of single changes timed per run; churnRate
	// and churnFor pace the stream of changes. Zero skips either.
	changes   int
	churnRate float64 // per second
	churnFor  time.Duration
}

func parsePlan(args []string) (*plan, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	sizes := fs.String("n", "1000", "numbers of objects, comma-separated")
	workers := fs.String("workers", "1,8", "worker counts, comma-separated")
	impls := fs.String("impl", "kfsm,hand", "implementations, comma-separated: kfsm, hand, hand-unfiltered, hand-full")
	replicas := fs.String("replicas", "", "numbers of sharded kfsm replicas, comma-separated: measures kfsm's sharded machines instead of kfsm against hand")
	p := &plan{}
	fs.IntVar(&p.rounds, "rounds", 3, "interleaved rounds per setting")
	fs.StringVar(&p.crds, "crds", "internal/testapi/crd", "the directory of the test API's CRDs")
	fs.StringVar(&p.profiles, "cpuprofile", "", "a directory for the controller processes' CPU and heap profiles")
	fs.StringVar(&p.logs, "logs", "", "a directory to keep the controller processes' logs in (by default they are removed)")
	fs.DurationVar(&p.timeout, "timeout", 15*time.Minute, "how long each phase of a run may take")
	fs.IntVar(&p.changes, "changes", 50, "single changes timed per run, one at a time, on distinct gadgets (0 skips them)")
	fs.Float64Var(&p.churnRate, "churn-rate", 50, "changes per second of the churn")
	fs.DurationVar(&p.churnFor, "churn-for", time.Minute, "how long the churn writes changes (0 skips it)")
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
		if flagSet(fs, "changes") || flagSet(fs, "churn-rate") || flagSet(fs, "churn-for") {
			return nil, errors.New("-changes, -churn-rate and -churn-for measure kfsm against hand: leave them out with -replicas")
		}
	}
	if p.rounds < 1 {
		return nil, fmt.Errorf("-rounds must be at least 1, not %d", p.rounds)
	}
	if p.timeout <= 0 {
		return nil, fmt.Errorf("-timeout must be positive, not %s", p.timeout)
	}
	if p.changes < 0 || p.changes > slices.Min(p.sizes) {
		return nil, fmt.Errorf("-changes must be from 0 to the smallest -n, %d, not %d: each changes a gadget of its own", slices.Min(p.sizes), p.changes)
	}
	if p.churnFor < 0 {
		return nil, fmt.Errorf("-churn-for must not be negative, not %s", p.churnFor)
	}
	if p.churnFor > 0 && p.churnTotal() < 1 {
		return nil, fmt.Errorf("-churn-rate %g for %s writes no change", p.churnRate, p.churnFor)
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
			return nil, fmt.Errorf("-impl: unknown implementation %q (kfsm, hand, hand-unfiltered, hand-full)", impl)
		}
		out = append(out, impl)
	}
	return out, nil
}
