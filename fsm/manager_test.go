package fsm_test

// Each guarantee of the package doc, checked the way operators run kfsm:
// under a real manager, against a real API server, where every write kfsm
// makes comes back as a watch event. The tests count handler runs, writes,
// events, log lines and metrics over time, not only end states.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// lateness is how much later than its backoff an attempt may come: a
// loaded machine delays the status write and the queue behind an attempt,
// which can make a backoff late but never early.
const lateness = 500 * time.Millisecond

// wantAttemptsAt fails unless the attempts came at the given offsets from
// the first, in seconds, within 20 %, or up to lateness later.
func wantAttemptsAt(t *testing.T, at []time.Time, offsets ...float64) {
	t.Helper()
	var got []string
	for _, a := range at {
		got = append(got, fmt.Sprintf("%.2fs", a.Sub(at[0]).Seconds()))
	}
	if len(at) != len(offsets) {
		t.Fatalf("%d attempts at %v, want %d at %v s", len(at), got, len(offsets), offsets)
	}
	for i, want := range offsets {
		if d := at[i].Sub(at[0]).Seconds(); d < want*0.8 || d > want*1.2+lateness.Seconds() {
			t.Errorf("attempt %d came at %.2fs, want %.0fs -20%%/+20%%+%v (all: %v)", i+1, d, want, lateness, got)
		}
	}
	t.Logf("attempts at %v", got)
}

// touch changes a label of the gadget every interval until the returned
// function is called: changes by someone else, which reconcile the object
// at once but must not hurry a backoff.
func (e *env) touch(name string, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(e.t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			patch := fmt.Appendf(nil, `{"metadata":{"labels":{"touched":"%d"}}}`, i)
			_ = e.direct.Patch(ctx, &gadget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.namespace}}, client.RawPatch(types.MergePatchType, patch))
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (e *env) stalled(name string) bool {
	return meta.IsStatusConditionTrue(e.get(name).Status.Conditions, fsm.ConditionStalled)
}

func (e *env) ready(name string) bool {
	return meta.IsStatusConditionTrue(e.get(name).Status.Conditions, fsm.ConditionReady)
}

func alwaysFails(attempts *runs) func(context.Context, *request) fsm.Result {
	return counted(attempts, func(context.Context, *request) fsm.Result {
		return fsm.Fail(errors.New("the metrics backend is down"))
	})
}

// Guarantee 7, and Fail's documented backoff: a state that always fails,
// with Retries(4), is tried at 0, 1, 3 and 7 s, however often someone else
// touches the object, then Stalled and left alone. Each failure is one
// status write, one event and one controller-runtime reconcile error.
func TestUnderManagerFailuresBackOffExponentially(t *testing.T) {
	e := newEnv(t)
	var attempts runs
	m := fsm.New[*gadget]("backoff", fsm.Lifecycle).
		Initial("Analyze").
		State("Analyze", alwaysFails(&attempts), fsm.To("Promoted"), fsm.Retries(4)).
		State("Promoted", done, fsm.Final())
	l := run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	stopTouching := e.touch("g", 250*time.Millisecond)
	e.fe.Await("the gadget to stall", func() bool { return e.stalled("g") })
	time.Sleep(3 * time.Second) // and nothing after
	stopTouching()

	wantAttemptsAt(t, attempts.times(), 0, 1, 3, 7)
	if n := l.status.Load(); n != 4 {
		t.Errorf("%d status writes, want 4: one per attempt", n)
	}
	events := e.apiEvents()
	if n := occurrences(events, fsm.ReasonHandlerFailed); n != 4 {
		t.Errorf("%d HandlerFailed events, want 4", n)
	}
	if n := occurrences(events, fsm.ReasonRetriesExhausted); n != 1 {
		t.Errorf("%d RetriesExhausted events, want 1", n)
	}
	controller := map[string]string{"controller": "backoff"}
	if n := metricValue(t, "controller_runtime_reconcile_errors_total", controller); n != 4 {
		t.Errorf("controller_runtime_reconcile_errors_total = %v, want 4", n)
	}
	if n := metricValue(t, "controller_runtime_terminal_reconcile_errors_total", controller); n != 1 {
		t.Errorf("controller_runtime_terminal_reconcile_errors_total = %v, want 1: the failure that stalled", n)
	}
	if n := metricValue(t, "kfsm_handler_errors_total", map[string]string{"machine": "backoff", "state": "Analyze"}); n != 4 {
		t.Errorf("kfsm_handler_errors_total = %v, want 4", n)
	}
}

// The backoff is in the status, so a new process keeps it: a manager
// restarted during the 4 s wait makes the fourth attempt at 7 s, not at
// once.
func TestUnderManagerBackoffSurvivesARestart(t *testing.T) {
	e := newEnv(t)
	var attempts runs
	machine := func(*fsmtest.Env) *fsm.Machine[*gadget] {
		return fsm.New[*gadget]("backoff-restart", fsm.Lifecycle).
			Initial("Analyze").
			State("Analyze", alwaysFails(&attempts), fsm.To("Promoted"), fsm.Retries(4)).
			State("Promoted", done, fsm.Final())
	}
	l := runFunc(e, machine)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the third attempt", func() bool { return attempts.count() == 3 })
	time.Sleep(time.Second)
	l.op.Restart()
	e.fe.Await("the gadget to stall", func() bool { return e.stalled("g") })
	time.Sleep(2 * time.Second)
	wantAttemptsAt(t, attempts.times(), 0, 1, 3, 7)
}

// Guarantee 1: a handler that changes the status and asks for an
// undeclared transition runs once, and only the refusal is written; it
// runs again when someone changes the object, once.
func TestUnderManagerARefusedTransitionRunsOnceAndWritesOnlyTheRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	m := fsm.New[*gadget]("refused", fsm.Lifecycle).
		Initial("Start").
		State("Start", counted(&calls, func(_ context.Context, r *request) fsm.Result {
			r.Object.Status.Count++
			return fsm.Next("Finished")
		}), fsm.To("Middle")).
		State("Middle", next("Finished"), fsm.To("Finished")).
		State("Finished", done, fsm.Final())
	l := run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	time.Sleep(10 * time.Second)

	g := e.get("g")
	t.Logf("refused, 10 s: %d handler runs, %d status writes", calls.count(), l.status.Load())
	if calls.count() != 1 || l.status.Load() != 1 {
		t.Errorf("in 10 s: %d handler runs and %d status writes, want 1 and 1", calls.count(), l.status.Load())
	}
	wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, fsm.ReasonIllegalTransition)
	if g.Status.State != "Start" || g.Status.Count != 0 {
		t.Errorf("state %s, count %d; want Start, and the refused run's count discarded (0)", g.Status.State, g.Status.Count)
	}
	if n := occurrences(e.apiEvents(), fsm.ReasonIllegalTransition); n != 1 {
		t.Errorf("%d IllegalTransition events, want 1", n)
	}

	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 1 })
	time.Sleep(10 * time.Second)
	t.Logf("refused, after a spec change and 10 s more: %d handler runs, %d status writes in all", calls.count(), l.status.Load())
	if calls.count() != 2 || l.status.Load() != 2 {
		t.Errorf("after a spec change: %d handler runs and %d status writes in all, want 2 and 2", calls.count(), l.status.Load())
	}
	if g := e.get("g"); g.Status.Count != 0 || g.Status.ObservedGeneration != g.Generation {
		t.Errorf("after a spec change: count %d, observedGeneration %d of %d", g.Status.Count, g.Status.ObservedGeneration, g.Generation)
	}
}

// The README's tutorial, as written, under a manager: with nothing
// changing outside, an open door costs its finalizer and one status write.
func TestUnderManagerTheTutorialDoorIsQuiet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := run(e, tutorial())
	door := &Door{ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: e.namespace}, Spec: v1alpha1.DoorSpec{Open: true}}
	if err := e.direct.Create(t.Context(), door); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	if err := e.direct.Get(t.Context(), client.ObjectKeyFromObject(door), door); err != nil {
		t.Fatal(err)
	}
	t.Logf("the open door, 10 s: %d writes", l.writes.Load())
	if n := l.writes.Load(); n > 2 {
		t.Errorf("the open door made %d writes in 10 s, want at most 2 (its finalizer and its status)", n)
	}
	if door.Status.State != "Open" || door.Status.Opened != 1 {
		t.Errorf("state %s, opened %d; want Open, 1", door.Status.State, door.Status.Opened)
	}
}

// kfsm's own writes never drive its loop: a handler that changes the
// status on every run (the tutorial's first version counted runs this
// way) runs once and writes once, then waits for a change from outside.
func TestUnderManagerAHandlerThatWritesOnEveryRunDoesNotLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	m := fsm.New[*Door]("door-counting-runs", fsm.Lifecycle).
		Initial("Open").
		State("Open", func(_ context.Context, r *fsm.Request[*Door]) fsm.Result {
			calls.mu.Lock()
			calls.at = append(calls.at, time.Now())
			calls.mu.Unlock()
			r.Object.Status.Opened++
			return fsm.Wait(0, "HeldOpen")
		}, fsm.To("Closed")).
		State("Closed", nil, fsm.Final())
	l := run(e, m)
	door := &Door{ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: e.namespace}, Spec: v1alpha1.DoorSpec{Open: true}}
	if err := e.direct.Create(t.Context(), door); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	t.Logf("writing on every run, 10 s: %d handler runs, %d writes", calls.count(), l.writes.Load())
	if calls.count() != 1 || l.writes.Load() != 1 {
		t.Errorf("in 10 s with nothing changing outside: %d handler runs and %d writes, want 1 and 1", calls.count(), l.writes.Load())
	}
	if err := e.direct.Get(t.Context(), client.ObjectKeyFromObject(door), door); err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataLabel(&door.ObjectMeta, "painted", "red")
	if err := e.direct.Update(t.Context(), door); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if calls.count() != 2 || l.writes.Load() != 2 {
		t.Errorf("after a change from outside: %d handler runs and %d writes in all, want 2 and 2", calls.count(), l.writes.Load())
	}
}

// Guarantee 3: a converged object costs no write and no event, however
// often it is reconciled: here the cache resyncs every second and the
// machine looks again every second.
func TestUnderManagerAConvergedObjectIsQuiet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	m := fsm.New[*gadget]("converged", fsm.Lifecycle).
		Resync(time.Second).
		Initial("Start").
		State("Start", next("Running"), fsm.To("Running")).
		State("Running", counted(&calls, done), fsm.Final())
	l := run(e, m, withResync(time.Second))
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(time.Second) // the events of the walk reach the server
	writes, events, runs := l.writes.Load(), len(e.apiEvents()), calls.count()

	time.Sleep(10 * time.Second)
	t.Logf("converged, 10 s: %d writes, %d events, %d handler runs", l.writes.Load()-writes, len(e.apiEvents())-events, calls.count()-runs)
	if n := l.writes.Load() - writes; n != 0 {
		t.Errorf("a converged object made %d writes in 10 s, want 0", n)
	}
	if n := len(e.apiEvents()) - events; n != 0 {
		t.Errorf("a converged object got %d events in 10 s, want 0", n)
	}
	if n := calls.count() - runs; n < 5 {
		t.Errorf("the converged handler ran %d times in 10 s; the resyncs should have run it at least 5 times", n)
	}
}

// Guarantee 9: a transition whose status write meets a conflict is
// reported once, when it is written: one event, one log line, one count.
func TestUnderManagerAConflictReportsATransitionOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("conflict-once", fsm.Lifecycle).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", done, fsm.Final())
	l := run(e, m)
	l.inject(&fault{op: "status", times: 1, err: apierrors.NewConflict(schema.GroupResource{Resource: "gadgets"}, "g", errors.New("injected"))})
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(2 * time.Second)

	if n := l.status.Load(); n != 1 {
		t.Fatalf("%d status writes went through, want 1 after the conflict", n)
	}
	events := e.apiEvents()
	if n := occurrences(events, fsm.ReasonNext); n != 1 {
		t.Errorf("%d events of the transition A→B, want 1", n)
	}
	if n := occurrences(events, fsm.ReasonCreated); n != 1 {
		t.Errorf("%d events of the transition into A, want 1", n)
	}
	var lines int
	for _, line := range l.logs.all() {
		if line.msg == "transition" && line.value("to") == "B" {
			lines++
		}
	}
	if lines != 1 {
		t.Errorf("%d transition log lines for A→B, want 1", lines)
	}
	if n := metricValue(t, "kfsm_transitions_total", map[string]string{"machine": "conflict-once", "from": "A", "to": "B", "reason": fsm.ReasonNext}); n != 1 {
		t.Errorf("kfsm_transitions_total{A→B} = %v, want 1", n)
	}
	for _, line := range l.logs.errors() {
		t.Errorf("a conflict was logged as an error: %s", line)
	}
}

// Guarantee 9: nine transitions are nine events that kubectl get events
// tells apart, the moves that kfsm forced among them as warnings.
func TestUnderManagerEveryTransitionIsADistinctEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var built atomic.Int32
	m := fsm.New[*gadget]("nine", fsm.Lifecycle).
		Initial("Intake").
		State("Intake", next("Check"), fsm.To("Check")).
		State("Check", next("Queue"), fsm.To("Queue")).
		State("Queue", func(context.Context, *request) fsm.Result { return fsm.Wait(0, "Queued") },
			fsm.To("Build"), fsm.Timeout(time.Second, "Build")).
		State("Build", func(context.Context, *request) fsm.Result {
			if built.Add(1) == 1 {
				return fsm.Fail(errors.New("flaky builder"))
			}
			return fsm.Next("Test")
		}, fsm.To("Test"), fsm.RetriesThen(1, "Test")).
		State("Test", next("Stage"), fsm.To("Stage")).
		State("Stage", next("Canary"), fsm.To("Canary")).
		State("Canary", next("Release"), fsm.To("Release")).
		State("Release", next("Done"), fsm.To("Done")).
		State("Done", done, fsm.Final())
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(2 * time.Second)

	out, err := e.fe.Kubectl("get", "events", "--field-selector", "involvedObject.name=g", "--no-headers",
		"-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var transitions []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || (!strings.Contains(line, "moved from") && !strings.Contains(line, "started in")) {
			continue
		}
		transitions = append(transitions, line)
		message := strings.Join(fields[2:], " ")
		if seen[message] {
			t.Errorf("two events read %q", message)
		}
		seen[message] = true
		wantType := corev1.EventTypeNormal
		if fields[1] == fsm.ReasonTimeout || fields[1] == fsm.ReasonRetriesExhausted {
			wantType = corev1.EventTypeWarning
		}
		if fields[0] != wantType {
			t.Errorf("event %q is %s, want %s", line, fields[0], wantType)
		}
	}
	t.Logf("kubectl get events:\n%s", out)
	if len(transitions) != 9 {
		t.Errorf("kubectl get events shows %d transitions, want 9:\n%s", len(transitions), out)
	}
	for _, reason := range []string{fsm.ReasonTimeout, fsm.ReasonRetriesExhausted} {
		if !strings.Contains(out, reason) {
			t.Errorf("no %s transition in:\n%s", reason, out)
		}
	}
}

// Events keep within the API's limits: an error of 5,000 characters is
// still recorded, its note cut to 1,024.
func TestUnderManagerALongErrorKeepsItsWarning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("long-error", fsm.Lifecycle).
		Initial("Work").
		State("Work", func(context.Context, *request) fsm.Result {
			return fsm.Fail(errors.New("the backend said: " + strings.Repeat("no ", 1700)))
		}, fsm.To("Finished"), fsm.Retries(1)).
		State("Finished", done, fsm.Final())
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the failure's event", func() bool { return occurrences(e.apiEvents(), fsm.ReasonHandlerFailed) == 1 })
	for _, ev := range e.apiEvents() {
		t.Logf("%s %s: %d bytes", ev.Type, ev.Reason, len(ev.Note))
		if ev.Reason == fsm.ReasonHandlerFailed && (len(ev.Note) > 1024 || !strings.HasSuffix(ev.Note, "…") || ev.Type != corev1.EventTypeWarning) {
			t.Errorf("the failure's event is %s with a note of %d bytes ending %q; want a Warning of at most 1024 bytes, cut with …", ev.Type, len(ev.Note), ev.Note[len(ev.Note)-10:])
		}
	}
}

// namespaceMachine is a pipeline that applies the namespace that the
// gadget's mode names, adopting it when the target is 1.
func namespaceMachine(name string) *fsm.Machine[*gadget] {
	return fsm.New[*gadget](name, fsm.Pipeline).
		Initial("Namespace").
		State("Namespace", func(ctx context.Context, r *request) fsm.Result {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Spec.Mode, Labels: map[string]string{"team": "web"}}}
			var opts []fsm.ApplyOption
			if r.Object.Spec.Target == 1 {
				opts = append(opts, fsm.Adopt())
			}
			return failOr(r.Apply(ctx, ns, opts...), fsm.Next("Serving"))
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final()).
		Owns(&corev1.Namespace{})
}

// namespaceWithData creates a namespace, as someone did by hand, with a
// ConfigMap of data in it.
func (e *env) namespaceWithData(name string) {
	e.t.Helper()
	if err := e.direct.Create(e.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		e.t.Fatal(err)
	}
	data := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: name}, Data: map[string]string{"orders": "42"}}
	if err := e.direct.Create(e.t.Context(), data); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deleteAndWait(name string) {
	e.t.Helper()
	if err := e.direct.Delete(e.t.Context(), e.get(name)); err != nil {
		e.t.Fatal(err)
	}
	e.fe.Await(name+" to be gone", func() bool {
		return apierrors.IsNotFound(e.direct.Get(e.t.Context(), e.key(name), &gadget{}))
	})
}

// Guarantee 10: Apply never takes over an object that kfsm did not create.
// It refuses, with a reason and a message that say how to adopt; deleting
// the parent leaves the object and its data.
func TestUnderManagerApplyRefusesAnObjectItDidNotCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	theirs := e.namespace + "-theirs"
	e.namespaceWithData(theirs)
	run(e, namespaceMachine("no-adopt"))
	e.gadget("g", v1alpha1.GadgetSpec{Mode: theirs})
	e.fe.Await("the refusal", func() bool {
		c := condition(e.get("g"), fsm.ConditionReady)
		return c != nil && c.Reason == fsm.ReasonAlreadyExists
	})
	msg := condition(e.get("g"), fsm.ConditionReady).Message
	if !strings.Contains(msg, "Namespace "+theirs) || !strings.Contains(msg, "fsm.Adopt()") {
		t.Errorf("Ready message %q does not name the namespace and say how to adopt it", msg)
	}
	var ns corev1.Namespace
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: theirs}, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[fsm.LabelOwnerUID] != "" || ns.Labels["team"] != "" {
		t.Errorf("the refused namespace was written: labels %v", ns.Labels)
	}
	// The event writer writes apart from the status: the Event may come
	// after the condition.
	e.fe.Await("an AlreadyExists event that names the namespace as related", func() bool {
		for _, ev := range e.apiEvents() {
			if ev.Reason == fsm.ReasonAlreadyExists && ev.Related != nil && ev.Related.Kind == "Namespace" && ev.Related.Name == theirs {
				return true
			}
		}
		return false
	})

	e.deleteAndWait("g")
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: "data", Namespace: theirs}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("after the parent went, the data in the namespace is: %v", err)
	}
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: theirs}, &ns); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("after the parent went, the namespace is %v (deleting: %v)", err, ns.DeletionTimestamp)
	}
}

// With fsm.Adopt, Apply takes the object over as documented: kfsm's
// labels, no owner reference, Adopted in the status; when the parent
// goes, the object is released, not deleted.
func TestUnderManagerAdoptTakesOverAndReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	theirs := e.namespace + "-adopted"
	e.namespaceWithData(theirs)
	run(e, namespaceMachine("adopt"))
	g := e.gadget("g", v1alpha1.GadgetSpec{Mode: theirs, Target: 1})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })

	var ns corev1.Namespace
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: theirs}, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[fsm.LabelOwnerUID] != string(g.UID) || ns.Annotations[fsm.AnnotationAdopted] != "true" || ns.Labels["team"] != "web" {
		t.Errorf("adopted namespace: labels %v, annotations %v", ns.Labels, ns.Annotations)
	}
	if len(ns.OwnerReferences) != 0 {
		t.Errorf("adopted namespace has owner references %v; garbage collection would delete it", ns.OwnerReferences)
	}
	if outs := e.get("g").Status.Outputs; len(outs) != 1 || outs[0].Adopted == nil || !*outs[0].Adopted {
		t.Errorf("status.outputs = %+v, want the namespace, adopted", outs)
	}

	e.deleteAndWait("g")
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: theirs}, &ns); err != nil || ns.DeletionTimestamp != nil {
		t.Fatalf("after the parent went, the adopted namespace is %v (deleting: %v)", err, ns.DeletionTimestamp)
	}
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: "data", Namespace: theirs}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("after the parent went, the data in the adopted namespace is: %v", err)
	}
	for _, key := range []string{fsm.LabelOwnerUID, fsm.LabelMachine} {
		if _, ok := ns.Labels[key]; ok {
			t.Errorf("the released namespace still has label %s", key)
		}
	}
	if _, ok := ns.Annotations[fsm.AnnotationAdopted]; ok {
		t.Error("the released namespace is still annotated as adopted")
	}
}

// A handler that runs longer than SlowHandlerAfter holds its worker; kfsm
// says so once per state, whatever the number of slow runs, and points to
// Request.Action.
func TestUnderManagerASlowHandlerIsLoggedOncePerState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logMu sync.Mutex
	var slow []string
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, "a handler ran long") {
			logMu.Lock()
			defer logMu.Unlock()
			slow = append(slow, args)
		}
	}, funcr.Options{})
	sleepy := func(context.Context, *request) fsm.Result {
		time.Sleep(300 * time.Millisecond)
		return fsm.Wait(100*time.Millisecond, "Dozing")
	}
	m := fsm.New[*gadget]("slow-handler", fsm.Lifecycle).
		Initial("Slow").
		State("Slow", counted(&runs{}, sleepy), fsm.To("Quick")).
		State("Quick", done, fsm.Final()).
		SlowHandlerAfter(200 * time.Millisecond)
	fsmtest.Run(e.fe, m, fsmtest.WithManagerOptions(func(o *manager.Options) { o.Logger = log }))
	e.gadget("a", v1alpha1.GadgetSpec{})
	e.gadget("b", v1alpha1.GadgetSpec{})
	time.Sleep(2 * time.Second) // several slow runs of each

	logMu.Lock()
	defer logMu.Unlock()
	if len(slow) != 1 || !strings.Contains(slow[0], `"state"="Slow"`) || !strings.Contains(slow[0], "Request.Action") {
		t.Errorf("slow-handler log lines %q, want one, for state Slow, naming Request.Action", slow)
	}
}

// Guarantee 7: a Stalled object resumes when the retry annotation asks,
// without a spec change.
func TestUnderManagerTheRetryAnnotationResumesAStalledObject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	var fixed atomic.Bool
	var askedMu sync.Mutex
	var asked []bool // Request.RetryAsked of each run
	m := fsm.New[*gadget]("retry-annotation", fsm.Lifecycle).
		Initial("Work").
		State("Work", counted(&calls, func(_ context.Context, r *request) fsm.Result {
			askedMu.Lock()
			asked = append(asked, r.RetryAsked)
			askedMu.Unlock()
			if !fixed.Load() {
				return fsm.Stop("DependencyMissing", "the database is not there")
			}
			return fsm.Done()
		}), fsm.Final())
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to stall", func() bool { return e.stalled("g") })
	fixed.Store(true)
	stopTouching := e.touch("g", 200*time.Millisecond)
	time.Sleep(2 * time.Second)
	stopTouching()
	if n := calls.count(); n != 1 {
		t.Fatalf("the stalled handler ran %d times, want 1: a label change is no reason to retry", n)
	}

	g := e.get("g")
	metav1.SetMetaDataAnnotation(&g.ObjectMeta, fsm.AnnotationRetry, "2026-11-21T10:00:00Z")
	if err := e.direct.Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(time.Second)
	if g := e.get("g"); calls.count() != 2 || g.Status.LastHandledRetry != "2026-11-21T10:00:00Z" || e.stalled("g") {
		t.Errorf("after the retry: %d runs in all, lastHandledRetry %q, stalled %v; want 2, the annotation's value, false", calls.count(), g.Status.LastHandledRetry, e.stalled("g"))
	}
	if n := occurrences(e.apiEvents(), fsm.ReasonRetryRequested); n != 1 {
		t.Errorf("%d RetryRequested events, want 1", n)
	}
	askedMu.Lock()
	defer askedMu.Unlock()
	if diff := cmp.Diff([]bool{false, true}, asked); diff != "" {
		t.Errorf("Request.RetryAsked of the runs (-want +got):\n%s", diff)
	}
}

// A paused object runs no handler, not even its deletion path, until the
// annotation goes; the Paused condition says so meanwhile.
func TestUnderManagerAPausedObjectRunsNoHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls, cleanups runs
	m := fsm.New[*gadget]("paused", fsm.Lifecycle).
		Initial("Work").
		State("Work", counted(&calls, done), fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", counted(&cleanups, done), fsm.Final())
	run(e, m)
	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.namespace, Annotations: map[string]string{fsm.AnnotationPaused: "true"}}}
	if err := e.direct.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the Paused condition", func() bool {
		return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionPaused)
	})
	time.Sleep(2 * time.Second)
	if calls.count() != 0 {
		t.Fatalf("a paused object ran its handler %d times", calls.count())
	}

	unpause := func() {
		g := e.get("g")
		delete(g.Annotations, fsm.AnnotationPaused)
		if err := e.direct.Update(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
	unpause()
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	if c := condition(e.get("g"), fsm.ConditionPaused); c != nil || calls.count() != 1 {
		t.Errorf("unpaused: Paused condition %+v, %d runs; want none and 1", c, calls.count())
	}

	// Paused again, the object waits with its finalizer even when deleted.
	g = e.get("g")
	metav1.SetMetaDataAnnotation(&g.ObjectMeta, fsm.AnnotationPaused, "true")
	if err := e.direct.Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the Paused condition", func() bool {
		return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionPaused)
	})
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if cleanups.count() != 0 || e.get("g").DeletionTimestamp == nil {
		t.Fatalf("a paused object's deletion path ran %d times", cleanups.count())
	}
	unpause()
	e.fe.Await("the gadget to be gone", func() bool {
		return apierrors.IsNotFound(e.direct.Get(t.Context(), e.key("g"), &gadget{}))
	})
	if cleanups.count() != 1 {
		t.Errorf("the deletion path ran %d times, want 1", cleanups.count())
	}
}

// Guarantee 5: no handler runs on a copy older than kfsm's last write,
// even when the cache serves old copies again and again.
func TestUnderManagerNoHandlerRunsOnAnOldCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	m := fsm.New[*gadget]("old-copies", fsm.Lifecycle).
		Initial("Count").
		State("Count", counted(&calls, func(_ context.Context, r *request) fsm.Result {
			r.Object.Status.Count++
			if r.Object.Status.Count >= 20 {
				return fsm.Done()
			}
			return fsm.Wait(50*time.Millisecond, "Counting")
		}), fsm.Final())
	l := run(e, m)
	// Every other read of the gadget returns the first copy ever read.
	var first *gadget
	var reads atomic.Int32
	l.mu.Lock()
	l.stale = func(key client.ObjectKey, obj client.Object) {
		g, ok := obj.(*gadget)
		if !ok || key.Name != "g" {
			return
		}
		switch {
		case first == nil:
			first = g.DeepCopy()
		case reads.Add(1)%2 == 0:
			first.DeepCopyInto(g)
		}
	}
	l.mu.Unlock()
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("twenty counts", func() bool { return e.ready("g") })

	calls.mu.Lock()
	rvs := calls.rvs
	calls.mu.Unlock()
	for i := 1; i < len(rvs); i++ {
		if resourceVersionOf(rvs[i]) <= resourceVersionOf(rvs[i-1]) {
			t.Errorf("run %d saw resourceVersion %s after run %d saw %s", i+1, rvs[i], i, rvs[i-1])
		}
	}
	if g := e.get("g"); g.Status.Count != 20 || len(rvs) != 20 {
		t.Errorf("count %d after %d runs, want 20 after 20: each run on the latest copy", g.Status.Count, len(rvs))
	}
}

func resourceVersionOf(rv string) int {
	var n int
	_, _ = fmt.Sscan(rv, &n)
	return n
}

// Guarantee 6: deletion interrupts a backoff at once, and a failing
// deletion path backs off like any state.
func TestUnderManagerDeletionInterruptsABackoff(t *testing.T) {
	e := newEnv(t)
	var attempts, cleanups runs
	m := fsm.New[*gadget]("delete-backoff", fsm.Lifecycle).
		Initial("Analyze").
		State("Analyze", alwaysFails(&attempts), fsm.To("Promoted")).
		State("Promoted", done, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", counted(&cleanups, func(context.Context, *request) fsm.Result {
			if cleanups.count() < 3 {
				return fsm.Fail(errors.New("the registry is down"))
			}
			return fsm.Next("Gone")
		}), fsm.To("Gone")).
		State("Gone", done, fsm.Final())
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("three attempts", func() bool { return attempts.count() == 3 }) // the next is 4 s away
	deleted := time.Now()
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the gadget to be gone", func() bool {
		return apierrors.IsNotFound(e.direct.Get(t.Context(), e.key("g"), &gadget{}))
	})
	at := cleanups.times()
	if len(at) == 0 || at[0].Sub(deleted) > time.Second {
		t.Errorf("the deletion path started %v after the deletion, want within a second", at[0].Sub(deleted))
	}
	if attempts.count() != 3 {
		t.Errorf("Analyze ran %d times, want 3: the deletion interrupted it", attempts.count())
	}
	wantAttemptsAt(t, at, 0, 1, 3)
}

// Guarantee 8: a panicking handler is retried with backoff like a failing
// one, counted, and the operator keeps running.
func TestUnderManagerAPanicIsAFailure(t *testing.T) {
	e := newEnv(t)
	var attempts runs
	m := fsm.New[*gadget]("panics", fsm.Lifecycle).
		Initial("Boom").
		State("Boom", counted(&attempts, func(_ context.Context, r *request) fsm.Result {
			if r.Object.Name == "bad" {
				panic("nil map somewhere")
			}
			return fsm.Done()
		}), fsm.Final(), fsm.Retries(3))
	run(e, m)
	e.gadget("bad", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to stall", func() bool { return e.stalled("bad") })
	at := attempts.times()
	wantAttemptsAt(t, at, 0, 1, 3)
	if msg := condition(e.get("bad"), fsm.ConditionStalled).Message; !strings.Contains(msg, "panicked: nil map somewhere") {
		t.Errorf("Stalled message %q does not say the handler panicked and why", msg)
	}
	if n := metricValue(t, "kfsm_handler_errors_total", map[string]string{"machine": "panics", "state": "Boom"}); n != 3 {
		t.Errorf("kfsm_handler_errors_total = %v, want 3", n)
	}
	if n := metricValue(t, "controller_runtime_reconcile_errors_total", map[string]string{"controller": "panics"}); n != 3 {
		t.Errorf("controller_runtime_reconcile_errors_total = %v, want 3", n)
	}
	e.gadget("good", v1alpha1.GadgetSpec{})
	e.fe.Await("another gadget to be Ready", func() bool { return e.ready("good") })
}

// Guarantee 10 and kfsm's own writes: applying children does not drive
// the loop, each state of the pass runs once; a child changed by hand is
// put right at once.
func TestUnderManagerChildrenDoNotDriveTheLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var configs runs
	m := fsm.New[*gadget]("web-quiet", fsm.Pipeline).
		Initial("Config").
		State("Config", counted(&configs, func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-config"}, Data: map[string]string{"target": "1"}}
			return failOr(r.Apply(ctx, cm), fsm.Next("Expose"))
		}), fsm.To("Expose")).
		State("Expose", func(ctx context.Context, r *request) fsm.Result {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": r.Object.Name}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
			return failOr(r.Apply(ctx, svc), fsm.Next("Serving"))
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{})
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(5 * time.Second)
	t.Logf("children applied, 5 s: the pass ran %d times", configs.count())
	if n := configs.count(); n != 1 {
		t.Errorf("the pass ran %d times in 5 s, want 1: kfsm's own applies and status write are no news", n)
	}

	var cm corev1.ConfigMap
	if err := e.direct.Get(t.Context(), e.key("g-config"), &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["target"] = "edited"
	if err := e.direct.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	e.fe.Await("the ConfigMap put right", func() bool {
		return e.direct.Get(t.Context(), e.key("g-config"), &cm) == nil && cm.Data["target"] == "1"
	})
	// At once is a moment on a quiet machine, and seconds on a loaded one;
	// the manager's resync would take hours.
	if took := time.Since(edited); took > 5*time.Second {
		t.Errorf("a child changed by hand was put right after %v, want at once", took)
	}
	time.Sleep(3 * time.Second)
	if n := configs.count(); n != 2 {
		t.Errorf("the pass ran %d times in all, want 2: once more for the edit", n)
	}
}

// A 409 on a child's delete keeps the child and its record: no Pruned
// event until it is really gone, and a deletion path does not end.
func TestUnderManagerAConflictOnAChildDeleteKeepsTheChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	isRole := func(o client.Object) bool { _, ok := o.(*rbacv1.ClusterRole); return ok }
	m := fsm.New[*gadget]("delete-conflict", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Namespace + "-reader"}}
			return failOr(r.Apply(ctx, role), fsm.Done())
		}, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final()).
		Owns(&rbacv1.ClusterRole{})
	l := run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	role := client.ObjectKey{Name: e.namespace + "-reader"}
	l.inject(&fault{op: "delete", match: isRole, times: 1, err: apierrors.NewConflict(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, role.Name, errors.New("injected"))})
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the failed delete", func() bool { return occurrences(e.apiEvents(), fsm.ReasonHandlerFailed) == 1 })
	if err := e.direct.Get(t.Context(), role, &rbacv1.ClusterRole{}); err != nil {
		t.Fatalf("after the conflict, the child is %v", err)
	}
	if g := e.get("g"); len(g.Status.Outputs) != 1 || len(g.Finalizers) != 1 {
		t.Errorf("after the conflict: outputs %v, finalizers %v; want the child and the finalizer kept", g.Status.Outputs, g.Finalizers)
	}
	if n := occurrences(e.apiEvents(), fsm.ReasonPruned); n != 0 {
		t.Errorf("%d Pruned events for a child that was not deleted", n)
	}
	e.fe.Await("the gadget to be gone", func() bool {
		return apierrors.IsNotFound(e.direct.Get(t.Context(), e.key("g"), &gadget{}))
	})
	if err := e.direct.Get(t.Context(), role, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the deletion path, the cluster-scoped child is %v", err)
	}
}

// A cluster-scoped child whose parent lives where this manager does not
// look is someone else's: no reconcile, no error.
func TestUnderManagerAForeignChildIsIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("foreign-child", fsm.Lifecycle).
		Initial("Start").
		State("Start", done, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final()).
		Owns(&rbacv1.ClusterRole{})
	l := run(e, m)
	foreign := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{
		Name:        e.namespace + "-foreign",
		Labels:      map[string]string{fsm.LabelMachine: "foreign-child", fsm.LabelOwnerUID: "0b5b0e0e-1111-2222-3333-444455556666", fsm.LabelManagedBy: "kfsm"},
		Annotations: map[string]string{fsm.AnnotationOwner: "another-install/g"},
	}}
	if err := e.direct.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.direct.Delete(context.Background(), foreign) })
	for i := range 5 {
		metav1.SetMetaDataLabel(&foreign.ObjectMeta, "touched", fmt.Sprint(i))
		if err := e.direct.Update(t.Context(), foreign); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	for _, line := range l.logs.errors() {
		t.Errorf("error logged about another install's child: %s", line)
	}
}

// An unwritable status (over the API server's size limit) is reported, in
// an event, a metric, a log line and a smaller write's condition, and no
// transition of the lost walk is counted or told.
func TestUnderManagerAnUnwritableStatusIsReportedAndCountsNoTransition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("too-large", fsm.Lifecycle).
		Initial("A").
		State("A", func(_ context.Context, r *request) fsm.Result {
			r.Object.Status.Note = strings.Repeat("x", 4<<20)
			return fsm.Next("B")
		}, fsm.To("B")).
		State("B", done, fsm.Final())
	l := run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the StatusWriteFailed event", func() bool {
		return occurrences(e.apiEvents(), fsm.ReasonStatusWriteFailed) >= 1
	})
	e.fe.Await("the condition that says so", func() bool {
		c := condition(e.get("g"), fsm.ConditionReady)
		return c != nil && c.Reason == fsm.ReasonStatusWriteFailed
	})
	time.Sleep(2 * time.Second)
	if n := metricValue(t, "kfsm_status_write_errors_total", map[string]string{"machine": "too-large"}); n < 1 {
		t.Errorf("kfsm_status_write_errors_total = %v, want at least 1", n)
	}
	for _, reason := range []string{fsm.ReasonCreated, fsm.ReasonNext} {
		if n := occurrences(e.apiEvents(), reason); n != 0 {
			t.Errorf("%d %s events for transitions that were never written", n, reason)
		}
	}
	for _, tr := range []map[string]string{
		{"machine": "too-large", "to": "A", "reason": fsm.ReasonCreated},
		{"machine": "too-large", "to": "B", "reason": fsm.ReasonNext},
	} {
		if n := metricValue(t, "kfsm_transitions_total", tr); n != 0 {
			t.Errorf("kfsm_transitions_total%v = %v for a transition never written", tr, n)
		}
	}
	var logged bool
	for _, line := range l.logs.all() {
		if line.msg == "transition" {
			t.Errorf("a transition never written was logged: %s", line)
		}
		logged = logged || (line.level < 0 && line.err != nil && strings.Contains(line.err.Error(), "writing the status"))
	}
	if !logged {
		t.Error("no error log line says the status could not be written")
	}
}

// When someone removes kfsm's finalizer by hand while the deletion path
// is under way, the children that garbage collection cannot reach are
// deleted all the same.
func TestUnderManagerChildrenOfAVanishedParentAreDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("vanished", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Namespace + "-vanished"}}
			return failOr(r.Apply(ctx, role), fsm.Done())
		}, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", func(context.Context, *request) fsm.Result {
			return fsm.Wait(time.Hour, "WaitingForTheBackup")
		}, fsm.To("Gone")).
		State("Gone", done, fsm.Final()).
		Owns(&rbacv1.ClusterRole{})
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the deletion path", func() bool { return e.get("g").Status.State == "Cleanup" })
	g := e.get("g")
	g.Finalizers = nil
	if err := e.direct.Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	role := client.ObjectKey{Name: e.namespace + "-vanished"}
	e.fe.Await("the cluster-scoped child to be deleted", func() bool {
		return apierrors.IsNotFound(e.direct.Get(t.Context(), role, &rbacv1.ClusterRole{}))
	})
}

// A child that carries its parent's UID but is missing from the status,
// as one applied just before a crash is, is found through the cache,
// whether it was there when the manager started or came later, and pruned
// once the parent's pass no longer applies it. An object that carries
// another parent's UID stays.
func TestUnderManagerAChildMissingFromTheStatusIsPruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.gadget("g", v1alpha1.GadgetSpec{})
	unrecorded := func(name string, uid types.UID) {
		t.Helper()
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.namespace, Labels: map[string]string{
				fsm.LabelManagedBy: "kfsm", fsm.LabelMachine: "web-unrecorded", fsm.LabelOwnerUID: string(uid),
			}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if uid == g.UID {
			svc.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Gadget",
				Name: g.Name, UID: g.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		}
		if err := e.direct.Create(t.Context(), svc); err != nil {
			t.Fatal(err)
		}
	}
	unrecorded("before-start", g.UID)
	unrecorded("another-parents", "0b5b0e0e-1111-2222-3333-444455556666")
	run(e, webMachine("web-unrecorded"))
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	e.fe.Await("the child there at start to be pruned", func() bool { return !e.exists(&corev1.Service{}, "before-start") })

	// Each child's event reconciles the parent, which must find that
	// child then: nothing reconciles the converged parent after it. A
	// burst, so that a lag between the cache and its index would show.
	const later = 20
	for i := range later {
		unrecorded(fmt.Sprintf("while-running-%d", i), g.UID)
	}
	e.fe.Await("the children that came later to be pruned", func() bool {
		var services corev1.ServiceList
		if err := e.direct.List(t.Context(), &services, client.InNamespace(e.namespace)); err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(services.Items, func(s corev1.Service) bool { return strings.HasPrefix(s.Name, "while-running-") })
	})
	if !e.exists(&corev1.Service{}, "another-parents") {
		t.Error("the Service of another parent was deleted")
	}
	if got := e.get("g").Status.Outputs; len(got) != 1 || got[0].Kind != "ConfigMap" {
		t.Errorf("g records %v, want only its ConfigMap", got)
	}
}

// Guarantee 2: a machine with an invalid graph or options registers no
// controller and says why.
func TestUnderManagerAnInvalidMachineIsRefused(t *testing.T) {
	t.Parallel()
	m := fsm.New[*gadget]("invalid", fsm.Lifecycle).
		HistoryLimit(-1).
		Initial("Start").
		State("Start", next("Nowhere"), fsm.To("Nowhere"))
	err := m.SetupWithManager(nil)
	if err == nil || !strings.Contains(err.Error(), "HistoryLimit(-1)") || !strings.Contains(err.Error(), "Nowhere") {
		t.Errorf("SetupWithManager() = %v, want every problem listed", err)
	}
}

// Redact keeps secrets out of everything kfsm writes: conditions, events,
// log lines (controller-runtime's included) and the returned error.
func TestUnderManagerRedactFiltersErrorsEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	password := regexp.MustCompile(`password=\S+`)
	m := fsm.New[*gadget]("redacted", fsm.Lifecycle).
		Redact(func(s string) string { return password.ReplaceAllString(s, "password=***") }).
		Initial("Connect").
		State("Connect", func(context.Context, *request) fsm.Result {
			return fsm.Fail(errors.New("cannot connect to postgres://app:password=hunter2@db:5432"))
		}, fsm.To("Connected"), fsm.Retries(2)).
		State("Connected", done, fsm.Final())
	l := run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to stall", func() bool { return e.stalled("g") })
	time.Sleep(time.Second)
	var texts []string
	for _, c := range e.get("g").Status.Conditions {
		texts = append(texts, c.Message)
	}
	for _, ev := range e.apiEvents() {
		texts = append(texts, ev.Note)
	}
	for _, line := range l.logs.all() {
		texts = append(texts, line.String())
	}
	var redacted bool
	for _, text := range texts {
		if strings.Contains(text, "hunter2") {
			t.Errorf("the secret leaked: %s", text)
		}
		redacted = redacted || strings.Contains(text, "password=***")
	}
	if !redacted {
		t.Error("the redacted error appears nowhere")
	}
}

// hostile is text that a terminal would obey: it sets the window title,
// clears the screen, writes the clipboard (OSC 52), forges a line, and
// starts a CSI as the C1 character.
const hostile = "\x1b]0;pwned\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \r\nForged: line \u009b31m \x7f"

// What kfsm writes from a handler's error, a panic, a Stop, an action's
// error or a handler's event reaches conditions and events with no
// control character, so that kubectl describe, which lets most of them
// through, prints it safely on one line; the words are still there.
func TestUnderManagerConditionsAndEventsHoldNoControlCharacter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("control", fsm.Lifecycle).
		Initial("Work").
		State("Work", func(_ context.Context, r *request) fsm.Result {
			r.Event(corev1.EventTypeNormal, "Odd"+hostile, "noted "+hostile)
			switch r.Object.Spec.Mode {
			case "fail":
				return fsm.Fail(errors.New("failed " + hostile))
			case "panic":
				panic("panicked " + hostile)
			case "stop":
				return fsm.Stop("Gave"+hostile, "stopped "+hostile)
			}
			a := r.Action("backup", func(context.Context) error { return errors.New("backup failed " + hostile) })
			if a.State == fsm.ActionFailed {
				return fsm.Fail(a.Err)
			}
			return fsm.Wait(0, "BackingUp")
		}, fsm.To("Finished"), fsm.Retries(1)).
		State("Finished", done, fsm.Final())
	run(e, m)
	names := []string{"fail", "panic", "stop", "action"}
	for _, name := range names {
		e.gadget(name, v1alpha1.GadgetSpec{Mode: name})
	}
	listEvents := func() []eventsv1.Event {
		var list eventsv1.EventList
		if err := e.direct.List(t.Context(), &list, client.InNamespace(e.namespace)); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	e.fe.Await("every gadget to stall, with an event", func() bool {
		stalled := 0
		for _, ev := range listEvents() {
			if strings.HasPrefix(ev.Note, "stalled in state Work") {
				stalled++
			}
		}
		return stalled == len(names) && !slices.ContainsFunc(names, func(n string) bool { return !e.stalled(n) })
	})

	controls := func(s string) bool { return strings.ContainsFunc(s, unicode.IsControl) }
	for _, name := range names {
		for _, c := range e.get(name).Status.Conditions {
			if controls(c.Message) || controls(c.Reason) {
				t.Errorf("%s: condition %s holds a control character: %q: %q", name, c.Type, c.Reason, c.Message)
			}
		}
		if msg := condition(e.get(name), fsm.ConditionStalled).Message; !strings.Contains(msg, "pwned") || !strings.Contains(msg, "Forged: line") {
			t.Errorf("%s: the Stalled message %q lost the text", name, msg)
		}
	}
	noted := false
	for _, ev := range listEvents() {
		if controls(ev.Note) || controls(ev.Reason) || controls(ev.Action) {
			t.Errorf("event %s holds a control character: %q, %q: %q", ev.Name, ev.Reason, ev.Action, ev.Note)
		}
		noted = noted || strings.HasPrefix(ev.Note, "noted ") && strings.Contains(ev.Note, "pwned")
	}
	if !noted {
		t.Error("no event keeps the handler's note")
	}
}

// countingLimiter is a rate limiter that counts what it is asked.
type countingLimiter struct {
	workqueue.TypedRateLimiter[reconcile.Request]
	asked atomic.Int32
}

func (l *countingLimiter) When(req reconcile.Request) time.Duration {
	l.asked.Add(1)
	return l.TypedRateLimiter.When(req)
}

// controller-runtime's options reach the controller as they are: a For
// predicate filters, and the given rate limiter times the requeues that
// are not kfsm's backoff, such as a status write the server refused.
func TestUnderManagerControllerOptionsPassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	limiter := &countingLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, time.Second)}
	m := fsm.New[*gadget]("options", fsm.Lifecycle).
		ForOptions(builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()["skip"] != "true" }))).
		WithOptions(controller.Options{RateLimiter: limiter, MaxConcurrentReconciles: 2}).
		Initial("Work").
		State("Work", counted(&calls, done), fsm.Final())
	l := run(e, m)
	skipped := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "skipped", Namespace: e.namespace, Labels: map[string]string{"skip": "true"}}}
	if err := e.direct.Create(t.Context(), skipped); err != nil {
		t.Fatal(err)
	}
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(time.Second)
	if s := e.get("skipped").Status.State; s != "" || calls.count() != 1 {
		t.Errorf("the filtered gadget is in state %q, and the handler ran %d times; want untouched, and 1", s, calls.count())
	}

	l.inject(&fault{op: "status", times: 1, err: apierrors.NewInternalError(errors.New("injected"))})
	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 1 })
	e.fe.Await("the new generation observed", func() bool {
		g := e.get("g")
		return g.Status.ObservedGeneration == g.Generation
	})
	if n := limiter.asked.Load(); n < 1 {
		t.Errorf("the given rate limiter was asked %d times, want at least once, for the refused write", n)
	}
}

// Guarantee 3 with children: a converged object costs no API request on
// a resync or a restart, because kfsm does not send an apply when the
// child is still the version that its last apply of the same content
// made. Drift is still put right: a child edited by hand is restored, a
// child deleted by hand is made again, and another applier's claim is a
// conflict. All of it holds with fsm.LeanCache's cache too, which keeps
// no managed fields.
func TestUnderManagerAConvergedObjectWithChildrenMakesNoRequests(t *testing.T) {
	t.Parallel()
	for name, lean := range map[string]bool{"Cache": false, "LeanCache": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			convergedObjectWithChildrenMakesNoRequests(t, lean)
		})
	}
}

func convergedObjectWithChildrenMakesNoRequests(t *testing.T, lean bool) {
	e := newEnv(t)
	opts := []func(*live){withResync(time.Second)}
	if lean {
		opts = append(opts, withLeanCache())
	}
	l := runFunc(e, func(*fsmtest.Env) *fsm.Machine[*gadget] { return webMachine("web-quiet") }, opts...)
	g := e.gadget("g", v1alpha1.GadgetSpec{Mode: "expose"})
	e.fe.AwaitReady(g)
	var cached corev1.ConfigMap
	if err := l.cached(t.Context(), client.ObjectKey{Namespace: e.namespace, Name: "g-config"}, &cached); err != nil {
		t.Fatal(err)
	}
	if kept := len(cached.ManagedFields) > 0; kept == lean {
		t.Errorf("the cache holds the child with %d managed fields entries; LeanCache: %v", len(cached.ManagedFields), lean)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g-config", Namespace: e.namespace}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.namespace}}
	requests := func() string {
		var counts []string
		for _, o := range []client.Object{g, cm, svc} {
			counts = append(counts, fmt.Sprintf("%T %s: %d writes, %d reads", o, o.GetName(), e.fe.Writes(o).Total(), e.fe.Reads(o)))
		}
		return strings.Join(counts, "; ")
	}
	walked := func(more int) {
		t.Helper()
		n := len(e.fe.Walks(g))
		e.fe.Await(fmt.Sprintf("%d more walks of the gadget", more), func() bool { return len(e.fe.Walks(g)) >= n+more })
	}
	walked(1) // the echoes have come back
	converged, events := requests(), len(e.fe.Events(g))

	walked(3) // the cache's resyncs
	if got := requests(); got != converged {
		t.Errorf("resyncs of a converged object made requests:\n got  %s\n want %s", got, converged)
	}
	l.op.Restart()
	walked(2)
	if got := requests(); got != converged {
		t.Errorf("a restart over a converged object made requests:\n got  %s\n want %s", got, converged)
	}
	if n := len(e.fe.Events(g)) - events; n != 0 {
		t.Errorf("a converged object got %d more events", n)
	}

	e.fe.Update(cm, func() { cm.Data["target"] = "edited by hand" })
	e.fe.Await("the edited ConfigMap to be restored", func() bool {
		return e.fe.Get(cm) && cm.Data["target"] == "0"
	})
	e.fe.Get(svc)
	uid := svc.UID
	e.fe.Delete(svc)
	e.fe.Await("the deleted Service to be made again", func() bool {
		return e.fe.Get(svc) && svc.UID != uid
	})
	claim := corev1ac.ConfigMap(cm.Name, e.namespace).WithData(map[string]string{"target": "99"})
	if err := e.direct.Apply(t.Context(), claim, client.FieldOwner("team-b"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the other applier's claim to be reported", func() bool {
		c := meta.FindStatusCondition(e.get("g").Status.Conditions, fsm.ConditionReady)
		return c != nil && c.Reason == fsm.ReasonApplyConflict && strings.Contains(c.Message, "team-b")
	})
}

// An apply that changes nothing answers with the version that someone
// else's last write made. When the cache has not seen that write yet,
// its watch event is still to come, and it is news: a handler that
// waits for a child's change must be woken by it.
func TestUnderManagerAChangeByOthersIsNotTakenForAnApplysEcho(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var approvals runs
	m := fsm.New[*gadget]("approval", fsm.Pipeline).
		Initial("Config").
		State("Config", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g-config"}, Data: map[string]string{"mode": "web"}}
			return failOr(r.Apply(ctx, cm), fsm.Next("Approval"))
		}, fsm.To("Approval")).
		State("Approval", counted(&approvals, func(ctx context.Context, r *request) fsm.Result {
			var cm corev1.ConfigMap
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Object.Namespace, Name: "g-config"}, &cm); client.IgnoreNotFound(err) != nil {
				return fsm.Fail(err)
			}
			if cm.Annotations["approved"] != "yes" {
				return fsm.Wait(0, "AwaitingApproval")
			}
			return fsm.Next("Serving")
		}), fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	gate := &watchGate{resource: "configmaps"}
	l := run(e, m, withWatchGate(gate))
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to await approval", func() bool { return e.get("g").Status.State == "Approval" })

	annotate := func(obj client.Object, key, value string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
		if err := e.direct.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	g, cm := e.get("g"), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g-config", Namespace: e.namespace}}
	annotate(g, fsm.AnnotationPaused, "true")
	e.fe.Await("the Paused condition", func() bool {
		return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionPaused)
	})
	// Someone else changes the child twice; the cache sees only the first.
	annotate(cm, "approved", "no")
	e.fe.Await("the cache to see the first change", func() bool {
		var seen corev1.ConfigMap
		return l.cached(t.Context(), client.ObjectKeyFromObject(cm), &seen) == nil && seen.Annotations["approved"] == "no"
	})
	gate.hold()
	held := true
	defer func() {
		if held {
			gate.release()
		}
	}()
	annotate(cm, "approved", "yes")

	// Unpaused, the walk applies the ConfigMap (its version is not the
	// one kfsm's apply left), which changes nothing, and waits.
	runs := approvals.count()
	annotate(g, fsm.AnnotationPaused, "false")
	e.fe.Await("the handler to run on the cache's copy", func() bool { return approvals.count() > runs })
	gate.release()
	held = false
	e.fe.Await("the approval to wake the gadget", func() bool { return e.get("g").Status.State == "Serving" })
}
