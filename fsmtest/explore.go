package fsmtest

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest/internal/explore"
)

var (
	exploreSchedule = flag.String("kfsm.explore", "", "run only this schedule of faults in Explore (as a failure's replay command gives it), with the clean run")
	exploreDepth    = flag.Int("kfsm.depth", 0, "combine up to this many faults in Explore, whatever the test says")
	exploreBudget   = flag.Duration("kfsm.budget", 0, "bound the time of each Explore's faulty runs, whatever the test says")
	exploreParallel = flag.Int("kfsm.parallel", 0, "run this many of each Explore's runs at once, whatever the test says")
)

// Depth is how many faults Explore combines in one run, at most; the
// default is 1. The -kfsm.depth flag overrides it.
func Depth(k int) FaultOption {
	return func(o *faultOptions) {
		if k < 1 {
			o.refuse("Depth(%d): Explore strikes at least one fault in a run", k)
		}
		o.depth = k
	}
}

// Budget bounds the time that Explore spends on its faulty runs; the
// schedules it had no time for are cut, and its report says how many.
// The default is ten minutes; the -kfsm.budget flag overrides it.
func Budget(d time.Duration) FaultOption {
	return func(o *faultOptions) {
		if d <= 0 {
			o.refuse("Budget(%v): a budget leaves no time for a faulty run", d)
		}
		o.budget = d
	}
}

// MaxRuns bounds the number of Explore's faulty runs, as Budget bounds
// their time.
func MaxRuns(n int) FaultOption {
	return func(o *faultOptions) {
		if n < 1 {
			o.refuse("MaxRuns(%d): a bound leaves no faulty run", n)
		}
		o.maxRuns = n
	}
}

// FailFast stops Explore at its first failed run that fails again alone
// (see Explore): the schedules not yet started are cut. go test's
// -failfast does the same.
func FailFast() FaultOption { return func(o *faultOptions) { o.failFast = true } }

// Parallel is how many of Explore's runs share the package's API server
// at once; the default is six times GOMAXPROCS, at most 12: each run
// waits at every Await until its operator is quiet, and the others use
// the CPU meanwhile. The -kfsm.parallel flag overrides it.
//
// The Explores of a test binary share that default, or the flag's number
// if larger, as the most runs at once: Explores of tests that run in
// parallel (t.Parallel) together run no more at once than one Explore
// does, and each fills the slots that the others' clean runs and last
// runs leave idle. A larger Parallel needs the flag.
func Parallel(n int) FaultOption {
	return func(o *faultOptions) {
		if n < 1 {
			o.refuse("Parallel(%d): Explore runs at least one run at a time", n)
		}
		o.parallel = n
	}
}

// defaultParallel is Parallel's default.
func defaultParallel() int { return min(12, 6*runtime.GOMAXPROCS(0)) }

// runSlots are the runs at once of every Explore of the test binary.
var runSlots = sync.OnceValue(func() chan struct{} {
	return make(chan struct{}, max(defaultParallel(), *exploreParallel))
})

// Explore runs scenario once as it is, then under every combination of up
// to Depth faults, each at a point of the run where it can strike:
//
//   - crash:OBJECT:N, the operator process dies once its write N to
//     OBJECT (RESOURCE/NAME, as moose/milo) reached the server;
//   - fail:OBJECT:N, write N to OBJECT fails before it reaches the server;
//   - conflict:OBJECT:N, write N to OBJECT (an update or a patch) is
//     answered 409 Conflict;
//   - delay:R:N, watch event N of resource R, and those after it on its
//     watch, reach the operator a second late, while the other watches go
//     on: events of parent and children out of order;
//   - relist:R:N, the watch of R breaks at event N, which is lost, and the
//     cache lists anew: intermediate states never seen;
//   - action-start:N and action-end:N, the process dies as the work of
//     action N starts, or as it returns before its outcome is written;
//   - call-fail:N, call-lost:N and call-timeout:N, call N to an outside
//     system (Outside.Call) fails before its effect, or makes it and
//     loses its answer, or makes it and times out;
//   - drift:NAME:N, the outside system that declared the drift NAME
//     (Outside.Drift) makes it behind the operator, just before the
//     scenario's change N;
//   - lag, every watch event reaches the operator Lag late: stale reads;
//   - clock:N, for a machine on the fake clock, the clock jumps past the
//     operator's next timer once step N of the scenario, an Await, held.
//     A jump may fire a timeout that the clean run never reached, so the
//     run is judged by the snapshots before it, by coming to rest and by
//     what it leaves; its later Awaits wait until the operator took in
//     the scenario's last change, and pass whether or not they hold.
//
// Each kind is of a class of Faults, or Explore's alone (delay, relist,
// clock); Only narrows the faults to some classes, as Faults does, which
// is Explore at depth 1 with the classes of AllFaults. With Replicas, the
// operator runs as replicas that share the machine, and a crash kills the
// replica that made the write.
//
// A run with k faults is made from one with k-1 that passed, with the new
// fault at a point after the last one struck. Points are deduplicated by
// an abstraction of the world there: what the scenario changed so far,
// each object as the operator's last write to it left it, whatever the
// verb (times, UIDs, versions, the history of transitions and the status
// of children, which other controllers write, left out) and what happens
// at the point. A
// fault at a point with the key of one explored before is not run again:
// the recovery after a fault mostly repeats the clean run's points, so
// that depth 2 costs little more than depth 1. Runs share the package's
// API server, Parallel at a time, each in a namespace and an operator of
// its own, within Budget.
//
// Every run, the clean one included, is checked against these oracles:
//
//   - its snapshots at each Await equal the clean run's, as in Faults;
//   - it comes to rest (eventual stable reconciliation): once the scenario
//     ended and the operator is quiet, a new operator process, which reads
//     every object anew as a resync does, makes no write and takes no
//     transition;
//   - with Effects, it counts the clean run's effects outside the
//     cluster, and the resync at rest causes none;
//   - no handler ran on a copy older than one the operator had written;
//   - with Replicas, no object was reconciled by two replicas at once;
//   - nothing is left being deleted (a leaked finalizer), no child that
//     kfsm labels as a machine's lacks both its parent and an owner
//     reference (an orphan), and the operator wrote no object that the
//     scenario created other than the machine's own.
//
// A failure is shrunk to the fewest of its faults that still fail, and
// reported with the faults, what failed, the transitions of the run
// beside the clean run's, and a command that runs that schedule again.
// A failure among the parallel runs may need their timing and pass
// alone, as its replay command runs it: the failures are run again
// with no other run in flight, up to three times each, and the first
// that fails again is reported first; one that passed alone says so.
// The report of what was explored (schedules generated, deduplicated,
// run, cut) is logged. Explore is skipped with -short.
func Explore[T fsm.Object](t *testing.T, machine func(*Env) *fsm.Machine[T], scenario func(*Env), opts ...FaultOption) {
	t.Helper()
	if testing.Short() {
		t.Skip("fault exploration runs without -short")
	}
	o, err := exploreOptions(opts)
	if err != nil {
		t.Fatalf("fsmtest: %v", err)
	}
	x := &explorer{t: t, o: o, search: explore.Search[*outcome]{
		Depth: o.depth, Budget: o.budget, MaxRuns: o.maxRuns, Parallel: o.parallel, FailFast: o.failFast,
		Injects: func(k explore.Kind) bool { return o.classes == nil || slices.Contains(o.classes, Fault(k.Class())) },
	}}
	if c, err := started(); err == nil && c != nil {
		// The runs share what discovery found: each run's client and
		// managers would otherwise discover the API server's resources
		// anew, a tenth of a run's requests. (New reports a cluster that
		// did not start.)
		hc, err := rest.HTTPClientFor(c.Config)
		if err != nil {
			t.Fatalf("fsmtest: %v", err)
		}
		mapper, err := apiutil.NewDynamicRESTMapper(c.Config, hc)
		if err != nil {
			t.Fatalf("fsmtest: %v", err)
		}
		x.mapper = mapper
	}
	x.search.Start = time.Now() // after the cluster's start, if this started it
	x.search.Run = func(s explore.Schedule) *outcome {
		slots := runSlots()
		slots <- struct{}{}
		defer func() { <-slots }()
		return exploreOnce(x, machine, scenario, s)
	}
	x.explore()
}

// explorer is one Explore: its clean run and its search.
type explorer struct {
	t      *testing.T
	o      faultOptions
	search explore.Search[*outcome]
	clean  *outcome
	// mapper is the RESTMapper of every run's client and managers.
	mapper meta.RESTMapper
}

// outcome is what one run did.
type outcome struct {
	explore.Outcome
	transitions []string
	snaps       *snapshots
}

func (o *outcome) Explored() *explore.Outcome { return &o.Outcome }

// exploreOptions are Explore's options: its defaults, then opts, then
// the flags. err names each bad value.
func exploreOptions(opts []FaultOption) (faultOptions, error) {
	o := faultOptions{depth: 1, budget: 10 * time.Minute, timeout: time.Minute, lag: 300 * time.Millisecond, parallel: defaultParallel()}
	for _, opt := range opts {
		opt(&o)
	}
	// A flag of 0, its default, leaves what the test says.
	switch {
	case *exploreDepth > 0:
		o.depth = *exploreDepth
	case *exploreDepth < 0:
		o.refuse("-kfsm.depth=%d: Explore strikes at least one fault in a run", *exploreDepth)
	}
	switch {
	case *exploreBudget > 0:
		o.budget = *exploreBudget
	case *exploreBudget < 0:
		o.refuse("-kfsm.budget=%v: a budget leaves no time for a faulty run", *exploreBudget)
	}
	switch {
	case *exploreParallel > 0:
		o.parallel = *exploreParallel
	case *exploreParallel < 0:
		o.refuse("-kfsm.parallel=%d: Explore runs at least one run at a time", *exploreParallel)
	}
	if f := flag.Lookup("test.failfast"); f != nil && f.Value.String() == "true" {
		o.failFast = true
	}
	return o, errors.Join(o.errs...)
}

// explore runs the clean run, then each depth in turn, and reports.
func (x *explorer) explore() {
	x.clean = x.search.Run(nil)
	if x.clean.Failed() {
		x.t.Errorf("fsmtest: the clean run failed, with no fault injected:\n%s", strings.Join(x.clean.Failures, "\n"))
		return
	}
	x.t.Logf("the clean run made %d points where faults may strike, in %v", len(x.clean.Points), x.clean.Took.Round(time.Millisecond))
	if *exploreSchedule != "" {
		s, err := explore.Parse(*exploreSchedule)
		if err != nil {
			x.t.Fatal(err)
		}
		x.report([]*outcome{x.search.Run(s)}, false)
		return
	}
	failed := x.search.From(x.clean)
	x.t.Log(x.search.Summary())
	x.report(failed, true)
}

// report fails the test with each failed run, shrunk if asked, once.
// A search's failures are tried alone (Search.Replays), up to five,
// until one replays, which is reported first: its replay command is the
// one a reader runs.
func (x *explorer) report(failed []*outcome, search bool) {
	seen := map[string]bool{}
	var runs []*outcome
	for _, out := range failed {
		if search {
			out = x.search.Shrink(out)
		}
		if out.Failed() && !seen[out.Schedule.String()] {
			seen[out.Schedule.String()] = true
			runs = append(runs, out)
		}
	}
	for i := range min(len(runs), 5) {
		if out := runs[i]; search && x.search.Replays(out) {
			runs = slices.Insert(slices.Delete(runs, i, i+1), 0, out)
			break
		}
	}
	for _, out := range runs[:min(len(runs), 5)] {
		replays, known := x.search.Replayed(out.Schedule)
		x.t.Error(x.describe(out, known && !replays))
	}
	if len(runs) > 5 {
		x.t.Errorf("fsmtest: and %d more failed schedules", len(runs)-5)
	}
}

// describe is the report of a failed run: its faults, what failed, its
// transitions beside the clean run's, and its replay command, which may
// pass if the run passed alone.
func (x *explorer) describe(out *outcome, passedAlone bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fsmtest: a run with %d fault(s) failed:\n", len(out.Schedule))
	for _, a := range out.Schedule {
		fmt.Fprintf(&b, "  %s: %s\n", a, a.Describe(out.At(a), x.o.lag))
	}
	if passedAlone {
		fmt.Fprintf(&b, "  (it failed among %d runs at a time and passed the %d times it ran again alone: it needs their timing, and its replay may pass; the last line runs the search again under that load)\n", x.o.parallel, explore.Tries)
	}
	for _, f := range out.Failures {
		b.WriteString(indent(f))
		b.WriteString("\n")
	}
	b.WriteString("transitions, the clean run's | this run's:\n")
	b.WriteString(besides(x.clean.transitions, out.transitions))
	b.WriteString("replay: " + replayCommand(x.t.Name(), out.Schedule.String()))
	if passedAlone {
		fmt.Fprintf(&b, "\nunder the same load: go test -run %s . -kfsm.depth=%d -kfsm.parallel=%d", shellQuote(runPattern(x.t.Name())), x.o.depth, x.o.parallel)
	}
	return b.String()
}

// besides lays two lists of lines side by side.
func besides(left, right []string) string {
	width := 0
	for _, l := range left {
		width = max(width, len(l))
	}
	var b strings.Builder
	for i := range max(len(left), len(right)) {
		var l, r string
		if i < len(left) {
			l = left[i]
		}
		if i < len(right) {
			r = right[i]
		}
		mark := "|"
		if l != r {
			mark = "≠"
		}
		fmt.Fprintf(&b, "  %-*s %s %s\n", width, l, mark, r)
	}
	return b.String()
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// replayCommand is the go test command, quoted for a POSIX shell, that
// runs the test named name alone under the schedule.
func replayCommand(name, schedule string) string {
	return "go test -run " + shellQuote(runPattern(name)) + " . -kfsm.explore=" + shellQuote(schedule)
}

// shellQuote quotes s as one word of a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runPattern is the -run pattern of the test named name alone.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
