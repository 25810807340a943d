package fsm_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// A change that someone else makes to the object while a walk runs does
// not throw the walk away: its status is written for the generation it
// saw, and the next reconcile takes the new spec.
func TestAChangeDuringAWalkKeepsTheWalk(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	m := fsm.New[*gadget]("concurrent-change", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			calls.Add(1)
			if r.Object.Spec.Target == 0 {
				var live gadget
				if err := e.direct.Get(ctx, client.ObjectKeyFromObject(r.Object), &live); err != nil {
					return fsm.Fail(err)
				}
				live.Spec.Target = 1
				if err := e.direct.Update(ctx, &live); err != nil {
					return fsm.Fail(err)
				}
			}
			return fsm.Done()
		}, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	e.reconcile(r, "g")
	g := e.get("g")
	if c := condition(g, fsm.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != 1 {
		t.Errorf("Ready = %+v, want True for generation 1", c)
	}
	if g.Generation != 2 || g.Status.ObservedGeneration != 1 || g.Status.State != "Start" {
		t.Errorf("generation %d, observedGeneration %d, state %q; want the walk of generation 1 recorded", g.Generation, g.Status.ObservedGeneration, g.Status.State)
	}
	e.reconcile(r, "g")
	if g := e.get("g"); g.Status.ObservedGeneration != 2 || calls.Load() != 2 {
		t.Errorf("observedGeneration %d after %d runs, want 2 after 2", g.Status.ObservedGeneration, calls.Load())
	}
}

// An operator that stops while a walk runs, as one does in every rolling
// update, leaves the walk unrecorded, and its next process walks the
// object again and records it once; the stop is not reported as an
// error: the status write that it cancelled is not one that the API
// server refused, so there is no StatusWriteFailed event or condition,
// no kfsm_status_write_errors_total and no error line.
func TestUnderManagerAStopDuringAWalkReportsNoStatusWriteError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	running := make(chan struct{})
	var runs atomic.Int32
	m := fsm.New[*gadget]("stopped-mid-walk", fsm.Lifecycle).
		Initial("A").
		State("A", func(ctx context.Context, _ *request) fsm.Result {
			if runs.Add(1) == 1 {
				close(running)
				<-ctx.Done() // the first process stops meanwhile
			}
			return fsm.Next("B")
		}, fsm.To("B")).
		State("B", done, fsm.Final())
	l := run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	select {
	case <-running:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler of A never ran")
	}
	l.op.Restart() // the first process stops, its event writer too, and a new one starts
	e.fe.Await("the next process to walk the gadget to B", func() bool { return e.ready("g") && e.get("g").Status.State == "B" })
	time.Sleep(2 * time.Second) // for anything late
	if n := runs.Load(); n != 2 {
		t.Errorf("A's handler ran %d times, want 2: once cut short by the stop, once in the next process", n)
	}
	events := e.apiEvents()
	for reason, want := range map[string]int{fsm.ReasonCreated: 1, fsm.ReasonNext: 1, fsm.ReasonStatusWriteFailed: 0} {
		if n := occurrences(events, reason); n != want {
			t.Errorf("%d %s events, want %d: the walk that the stop cut short is told by the next process alone", n, reason, want)
		}
	}
	if n := metricValue(t, "kfsm_status_write_errors_total", map[string]string{"machine": "stopped-mid-walk"}); n != 0 {
		t.Errorf("kfsm_status_write_errors_total = %v, want 0: the API server refused nothing", n)
	}
	for _, line := range l.logs.all() {
		if line.level < 0 {
			t.Errorf("an error line as the operator stopped: %s", line)
		}
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
