package fsmtest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest/internal/explore"
)

// Fault is a class of fault that Faults injects, after those that Sieve
// (OSDI '22) and Acto (SOSP '23) found operator bugs with.
type Fault string

const (
	// Crash kills the operator right after its k-th write reached the API
	// server, for every k of the clean run: nothing of the old process
	// reaches the server again, and a new process, with nothing in
	// memory, takes over. It finds work that is not idempotent and state
	// kept only in memory.
	Crash Fault = "crash"
	// FailWrite fails the k-th write before it reaches the API server, for
	// every k: a network error. It finds writes whose failure is lost.
	FailWrite Fault = "fail-write"
	// StaleReads delays every watch event that reaches the operator's
	// cache, so that reads lag behind the operator's own writes. It finds
	// handlers that act on what they read from the cache as if it were
	// current.
	StaleReads Fault = "stale-reads"
	// Conflicts answers a write that changes an object (an update or a
	// patch) with 409 Conflict, as when someone else changed the object
	// first: once for each such write of the clean run.
	Conflicts Fault = "conflicts"
	// Bursts makes the scenario's changes while the operator is stopped,
	// so that it sees only the last of them: intermediate states it never
	// observes.
	Bursts Fault = "bursts"
	// CrashInAction kills the operator inside each action of the clean
	// run, twice: as the action's work starts, after its intent was
	// written (the work may get to its effect or not, as when a process
	// dies during an external call), and as the work returns, after its
	// effect and before its outcome is written. The crashes before and
	// after the intent's write are Crash's. It finds actions that run
	// twice, or whose effect is lost, when their run is: count the
	// effects with Effects, from the fake of the service the action calls.
	CrashInAction Fault = "crash-in-action"
	// OutsideFailures strikes each call that the clean run made to an
	// outside system (Env.Outside), three times: the call fails before
	// its effect, it makes its effect and its answer is lost, and it
	// makes its effect and its caller times out. It finds retries that
	// repeat an effect after an answer lost on the wire, and effects
	// that a failure loses: count them with Effects.
	OutsideFailures Fault = "outside-failures"
	// Drift makes each change that an outside system declares with
	// Outside.Drift (a database stopped by hand, a record removed) once,
	// just before each call of the clean run to that system, behind the
	// operator's back. It finds handlers that trust what they did or saw
	// before over what the system says now: a condition of the last pass
	// taken as proof that an effect still holds, a step skipped because
	// the status says it was done.
	Drift Fault = "drift"
)

// AllFaults are the classes Faults injects unless told otherwise.
var AllFaults = []Fault{Crash, FailWrite, StaleReads, Conflicts, Bursts, CrashInAction, OutsideFailures, Drift}

// FaultOption changes what Faults and Explore do.
type FaultOption func(*faultOptions)

type faultOptions struct {
	classes []Fault
	ignore  []string
	lag     time.Duration
	timeout time.Duration
	also    []func(*Env) func(manager.Manager) error
	effects func(*Env) map[string]int

	replicas int                      // see Replicas
	group    func(replica int) string // the replicas' group names, for tests of the overlap oracle

	depth, maxRuns, parallel int
	budget                   time.Duration
	failFast                 bool

	errs []error // the options' bad values, which Explore reports before it runs anything
}

// refuse records an option's bad value.
func (o *faultOptions) refuse(format string, args ...any) {
	o.errs = append(o.errs, fmt.Errorf(format, args...))
}

// Only injects these classes of fault alone. Without it, Faults injects
// AllFaults, and Explore every kind of fault it knows, those of no class
// (jumps of the fake clock, watch events delayed or lost) too.
func Only(classes ...Fault) FaultOption {
	return func(o *faultOptions) {
		if len(classes) == 0 {
			o.refuse("Only() names no class of fault: leave it out for them all")
		}
		for _, c := range classes {
			if !slices.Contains(AllFaults, c) {
				o.refuse("Only(%q): no class of fault is so named; the classes are %s", c, faultNames(AllFaults))
			}
		}
		o.classes = classes
	}
}

// faultNames lists classes for a message.
func faultNames(classes []Fault) string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}

// Lag sets how late every watch event reaches the operator in a
// StaleReads run (lag); the default is 300 ms.
func Lag(d time.Duration) FaultOption {
	return func(o *faultOptions) {
		if d < 0 {
			o.refuse("Lag(%v): a watch event cannot reach the operator before it happens", d)
		}
		o.lag = d
	}
}

// Ignore leaves the named fields out of the snapshots, wherever they
// appear, for values that differ between two correct runs, such as an
// address of a server that each run starts anew.
func Ignore(fields ...string) FaultOption {
	return func(o *faultOptions) { o.ignore = append(o.ignore, fields...) }
}

// Converge bounds each wait of a faulty run: a run that does not converge
// in this time fails. The default is one minute. A run whose operator
// comes to rest short of what the scenario awaits (no request, no walk,
// no outside call, no action for 15 seconds) fails sooner.
func Converge(d time.Duration) FaultOption {
	return func(o *faultOptions) {
		if d <= 0 {
			o.refuse("Converge(%v): a run needs some time to converge", d)
		}
		o.timeout = d
	}
}

// AlsoRun registers more with each run's manager, made for the run's Env:
// what the machine needs beside itself, such as a webhook or another
// machine.
func AlsoRun(setup func(*Env) func(manager.Manager) error) FaultOption {
	return func(o *faultOptions) { o.also = append(o.also, setup) }
}

// Faults is Explore at depth 1 with the classes above: it runs scenario
// once as it is, then again under each fault of each class at every point
// of the clean run where it may strike (after each write, inside each
// action, at each outside call, with every watch event late, with the
// scenario's changes in a burst), each run in a namespace and an
// operator of its own, and checks every run against Explore's oracles.
// scenario drives objects through their life with Env's Create, Update,
// Delete and Await methods; machine makes the machine anew for each
// operator process, as a new process would. Options are Explore's; Only
// narrows the classes.
//
// At every Await of the scenario, once the operator has been quiet for a
// moment (and, after a crash or a restart, its new process has walked
// every object), each run takes a snapshot: the status of the machine's
// objects (times, UIDs and resourceVersions left out), their finalizers,
// and their children (kind, name, labels, annotations and content;
// generated names and server-allocated fields left out). A faulty run
// must take the same snapshots as the clean one. The history of
// transitions and the failure count are left out: how an object got
// there may differ between correct runs (a retried failure, a pipeline
// resting on its way, a burst), where it is may not.
//
// A failure names the fault, what failed and a command that replays that
// run with the clean one. Fault-injection runs take time: Faults is
// skipped with -short.
//
// A machine on the Env's fake clock (WithClock(e.Clock)) needs no Step for
// the backoffs that faults cause: in a faulty run, when an Await does not
// hold, no action runs, the operator has been quiet for a moment and a
// handler's failure backs off, the run moves the clock to the backoff's
// end. Waits and timeouts are the scenario's to step through, in every
// run alike. Outside Faults and Explore, only the test moves the clock; an
// Await that gives up says when the operator's next timer is.
//
// Check outcomes inside Awaits: in a Bursts run, the Awaits before the
// last change return at once, so a plain check between two of them sees
// the world before the burst.
func Faults[T fsm.Object](t *testing.T, machine func(*Env) *fsm.Machine[T], scenario func(*Env), opts ...FaultOption) {
	t.Helper()
	Explore(t, machine, scenario, append([]FaultOption{Only(AllFaults...)}, opts...)...)
}

// snapshots records a run: the scenario's operations and, at each Await,
// what the operator had made of them.
type snapshots struct {
	ops   []string
	taken map[int]snapshot // by index in ops

	ignore []string      // fields left out
	lag    time.Duration // how late watch events reach the operator
	limit  time.Duration // how long quiet waits at most; 10s if zero

	// For a faulty run:
	clean     *snapshots
	point     string // the fault, for messages
	holdUntil int    // bursts: the operator starts once this op is done; -1 for none
	start     func()
	started   bool

	// Effects outside the cluster, when the test counts them:
	effects     func(*Env) map[string]int
	counted     map[string]int
	countedBusy string // what kept the operator busy when they were counted

	// Where the run's faults strike, and what the scenario made:
	jumps map[int]bool // the steps after which the fake clock jumps
	trace *explore.Tracker
	mine  []apiKey // the objects the scenario created
}

type snapshot struct {
	what    string
	objects map[string]any // nil in a faulty run before its first fault struck
}

// unstruck reports whether this is a faulty run in which no fault has
// struck yet: up to there it is the clean run, and its snapshots need not
// be read, for they cannot differ from the clean run's by a fault.
func (s *snapshots) unstruck() bool { return s.faulty() && !s.trace.AnyStruck() }

// change notes a change the scenario made; walks is the number of walks
// before it was written.
func (s *snapshots) change(what string, walks int) {
	if s == nil {
		return
	}
	s.ops = append(s.ops, what)
	s.trace.Change(walks)
	if s.holdUntil >= 0 && !s.started && len(s.ops)-1 >= s.holdUntil {
		s.started = true
		s.start()
	}
}

func (s *snapshots) deleted(walks int) { s.change("delete", walks) }

// created notes an object that the scenario created.
func (s *snapshots) created(k apiKey) {
	if s != nil {
		s.mine = append(s.mine, k)
	}
}

// skipping reports whether an Await is to be skipped: in a burst, the
// operator is not running yet.
func (s *snapshots) skipping(what string) bool {
	if s == nil || s.holdUntil < 0 || s.started {
		return false
	}
	s.ops = append(s.ops, "await "+what)
	return true
}

// lastChange is the index of the last change before the first deletion.
func (s *snapshots) lastChange() int {
	last := -1
	for i, op := range s.ops {
		if op == "delete" {
			break
		}
		if !strings.HasPrefix(op, "await ") {
			last = i
		}
	}
	return last
}

// clockJumped reports whether the fake clock jumped in the run.
func (s *snapshots) clockJumped() bool { return s != nil && s.trace.ClockJumped() }

// faulty reports whether this is a run with a fault, not the clean run.
func (s *snapshots) faulty() bool { return s != nil && s.point != "" }

// moment is how long the operator makes no write before it counts as
// quiet: longer than its watch events take to reach it, so that what its
// last writes set off has happened.
func (s *snapshots) moment() time.Duration { return 300*time.Millisecond + s.lag }

// quietLimit is how long quiet waits at most: 10 seconds, unless a test
// of this package sets s.limit.
func (s *snapshots) quietLimit() time.Duration {
	if s.limit == 0 {
		return 10 * time.Second
	}
	return s.limit
}

// quiet waits until the operator has made no write for a moment, with
// its processes caught up and, under Replicas, every object's slot held.
// It waits quietLimit at most, then says what was not quiet: an operator
// still busy then is no rest to judge by.
func (s *snapshots) quiet(e *Env) string {
	moment := s.moment()
	for deadline := time.Now().Add(s.quietLimit()); ; time.Sleep(50 * time.Millisecond) {
		why := s.busy(e, moment)
		switch {
		case why == "":
			return ""
		case time.Now().Before(deadline):
			continue
		case why == stillWrote:
			why += " (last: " + lastWrites(e.api.all(), 3) + ")"
		}
		return why
	}
}

// stillWrote is busy's answer for an operator that wrote a moment ago.
const stillWrote = "it still wrote"

// busy says what keeps the operator from being quiet for a moment, or "".
func (s *snapshots) busy(e *Env, moment time.Duration) string {
	now := time.Now()
	switch {
	case e.api.quietFor(now) <= moment:
		return stillWrote
	case s.trace.IdleFor(now) <= moment:
		return "a fault still held back a message"
	case !e.held():
		return "a crashed replica's objects still waited for a live replica to hold their slot"
	case !e.caughtUp():
		return "a process of it that crashed or restarted was not yet replaced by one that had read every object"
	}
	return ""
}

// settled keeps the snapshot of objects once an Await succeeded and the
// operator has been quiet for a moment.
func (s *snapshots) settled(e *Env, what string, objects map[string]any) {
	if s.taken == nil {
		s.taken = map[int]snapshot{}
	}
	s.taken[len(s.ops)] = snapshot{what: what, objects: objects}
	s.ops = append(s.ops, "await "+what)
	step := len(s.ops)
	if s.trace == nil || !e.Clock.HasWaiters() {
		return
	}
	// A point where the fake clock may jump past the operator's next
	// timer, as when the process was paused for a while or its node's
	// clock was set forward: the timeouts and waits due by then fire at
	// once.
	next := e.walks.nextTimer(e.Clock.Now(), false)
	if next.IsZero() {
		return
	}
	if seq := s.trace.Await(step, "await "+what); s.jumps[step] {
		s.trace.Struck(explore.Atom{Kind: explore.Clock, N: step}, seq)
		e.Clock.SetTime(next.Add(time.Second))
		s.trace.Jumped()
	}
}

// compare fails t where the run's snapshots differ from the clean run's.
func (s *snapshots) compare(t testing.TB) {
	t.Helper()
	for i, want := range s.clean.taken {
		got, ok := s.taken[i]
		if !ok {
			if s.holdUntil >= 0 && i < s.holdUntil || s.clockJumped() {
				continue // in the burst, or after the clock jumped
			}
			t.Errorf("%s: the run never reached await %q", s.point, want.what)
			continue
		}
		if got.objects == nil {
			continue // before the first fault struck
		}
		if diff := cmp.Diff(want.objects, got.objects); diff != "" {
			t.Errorf("%s: at await %q the objects differ from the clean run (-clean +faulty):\n%s", s.point, want.what, diff)
		}
	}
}

// snapshot is what the operator made of the test's namespace: its
// objects' status and finalizers, and their children.
func (e *Env) snapshot() map[string]any {
	e.T.Helper()
	out := map[string]any{}
	for _, gvk := range e.parentKinds() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := e.Client.List(context.Background(), list, client.InNamespace(e.Namespace)); err != nil {
			e.T.Fatalf("fsmtest: listing %s: %v", gvk.Kind, err)
		}
		for _, u := range list.Items {
			out[gvk.Kind+"/"+u.GetName()] = map[string]any{
				"finalizers": toAny(u.GetFinalizers()),
				"status":     explore.WithoutPath(e.normalize(u.Object["status"])),
			}
		}
	}
	for _, u := range e.children(nil) {
		name := u.GetName()
		if g := u.GetGenerateName(); g != "" {
			name = g + "*"
		}
		key := fmt.Sprintf("%s/%s", u.GetKind(), name)
		if ref := u.GetOwnerReferences(); len(ref) > 0 {
			key += " of " + ref[0].Kind + "/" + ref[0].Name
		}
		c := map[string]any{}
		for k, v := range u.Object {
			if k != "metadata" && k != "status" && k != "apiVersion" && k != "kind" {
				c[k] = e.normalize(v)
			}
		}
		c["labels"] = e.normalize(toAnyMap(u.GetLabels()))
		c["annotations"] = e.normalize(toAnyMap(u.GetAnnotations()))
		c["finalizers"] = toAny(u.GetFinalizers())
		// Two children with one generated name prefix are a duplicate.
		if prev, ok := out[key]; ok {
			c = map[string]any{"duplicates": []any{prev, c}}
		}
		out[key] = c
	}
	return out
}

// normalize leaves out of v what differs between two correct runs, as
// the run's snapshots do.
func (e *Env) normalize(v any) any {
	return explore.World{Namespace: e.Namespace, Ignore: e.snap.ignored()}.Normalize(v)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func toAnyMap(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// checkWalks fails the test where a handler ran on a copy of an object
// older than one the operator had itself written before the walk began:
// kfsm's guard against stale caches must have stopped it, unless a
// handler wrote its own object behind kfsm's back. Every test checks it
// at its end.
func (e *Env) checkWalks() {
	e.T.Helper()
	e.walks.mu.Lock()
	defer e.walks.mu.Unlock()
	written := map[string]int64{}
	for _, w := range e.walks.walks {
		rv, _ := strconv.ParseInt(w.ResourceVersion, 10, 64)
		if before := written[w.Object.Name]; len(w.Steps) > 0 && rv < before {
			e.T.Errorf("fsmtest: %sa handler of %s ran on %s at version %d, older than version %d that the operator had written", e.snap.faultPoint(), w.machine, w.Object.Name, rv, before)
		}
		written[w.Object.Name] = max(written[w.Object.Name], w.written)
	}
}

// faultPoint is how a failure in a faulty run begins: the fault, for a
// message that names it.
func (s *snapshots) faultPoint() string {
	if s == nil || s.point == "" {
		return ""
	}
	return s.point + ": "
}

func (s *snapshots) ignored() []string {
	if s == nil {
		return nil
	}
	return s.ignore
}
