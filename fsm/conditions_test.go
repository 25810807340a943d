package fsm_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestUndeclaredNextIsRefused(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("illegal", fsm.Lifecycle).
		Initial("Start").
		State("Start", next("Elsewhere"), fsm.To("Middle")).
		State("Middle", next("Elsewhere"), fsm.To("Elsewhere")).
		State("Elsewhere", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	e.reconcile(r, "g")
	g := e.get("g")
	if g.Status.State != "Start" {
		t.Errorf("state = %q, want Start: an undeclared transition must not be taken", g.Status.State)
	}
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, fsm.ReasonIllegalTransition)
	wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, fsm.ReasonIllegalTransition)
	if !slices.Contains(e.events.reasons(), fsm.ReasonIllegalTransition) {
		t.Errorf("no IllegalTransition event; events: %v", e.events.reasons())
	}

	// Reported once: the same refusal again changes nothing.
	e.writes.Store(0)
	n := len(e.events.all())
	e.reconcile(r, "g")
	if e.writes.Load() != 0 || len(e.events.all()) != n {
		t.Errorf("a repeated refusal made %d writes and %d events, want 0 and 0", e.writes.Load(), len(e.events.all())-n)
	}
}

// The refusal says why the transition is illegal: the target is declared
// but is not an exit, or no state of its name is declared at all, with the
// closest name for a typo. kfsm vet says the same before the code runs.
func TestRefusalSaysWhyTheTransitionIsIllegal(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("refusals", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(_ context.Context, r *request) fsm.Result {
			switch r.Object.Spec.Mode {
			case "undeclared":
				return fsm.Next("Nowhere")
			case "typo":
				return fsm.Next("Midle")
			case "events":
				return fsm.Next("Middle", "Nowhere")
			}
			return fsm.Next("Elsewhere")
		}, fsm.To("Middle")).
		State("Middle", next("Elsewhere"), fsm.To("Elsewhere")).
		State("Elsewhere", done, fsm.Final())
	r := e.reconciler(m)
	for mode, want := range map[string]string{
		"declared":   "state Start asked to move to Elsewhere, which is not among its exits [Middle]; the transition was refused",
		"undeclared": "state Start asked to move to Nowhere, but no state Nowhere is declared; its exits are [Middle]; the transition was refused",
		"typo":       "state Start asked to move to Midle, but no state Midle is declared (did you mean Middle?); its exits are [Middle]; the transition was refused",
		"events":     "state Start raised events [Middle, Nowhere]; no state Nowhere is declared; its exits are [Middle]; the transition was refused",
	} {
		e.gadget(mode, v1alpha1.GadgetSpec{Mode: mode})
		e.reconcile(r, mode)
		g := e.get(mode)
		wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, fsm.ReasonIllegalTransition)
		if msg := condition(g, fsm.ConditionStalled).Message; msg != want {
			t.Errorf("%s: Stalled message %q, want %q", mode, msg, want)
		}
	}
}

func TestPipelineConditionsFollowThePass(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("pipeline", fsm.Pipeline).
		Initial("Validate").
		State("Validate", next("Build"), fsm.To("Build")).
		State("Build", func(_ context.Context, r *request) fsm.Result {
			if r.Object.Spec.Target < 2 {
				return fsm.Wait(0, "WaitingForTarget")
			}
			return fsm.Next("Serving")
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{Target: 1})

	e.reconcile(r, "g")
	g := e.get("g")
	wantCondition(t, g, "Validate", metav1.ConditionTrue, fsm.ReasonPassed)
	wantCondition(t, g, "Build", metav1.ConditionFalse, "WaitingForTarget")
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, "WaitingForTarget")
	if c := condition(g, "Serving"); c != nil {
		t.Errorf("state Serving was not reached but has a condition: %+v", c)
	}
	if g.Status.State != "Build" {
		t.Errorf("state = %q, want Build, where the pass rests", g.Status.State)
	}

	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 2 })
	e.reconcile(r, "g")
	g = e.get("g")
	wantCondition(t, g, "Build", metav1.ConditionTrue, fsm.ReasonPassed)
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
	if g.Status.State != "Serving" {
		t.Errorf("state = %q, want Ready", g.Status.State)
	}

	// Back below target: the pass stops at Build again, and nothing says
	// the later states still hold.
	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 0 })
	e.reconcile(r, "g")
	g = e.get("g")
	wantCondition(t, g, "Build", metav1.ConditionFalse, "WaitingForTarget")
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, "WaitingForTarget")
	if c := condition(g, "Serving"); c != nil {
		t.Errorf("state Serving was left with a stale condition: %+v", c)
	}
	if g.Status.State != "Build" {
		t.Errorf("state = %q, want Build", g.Status.State)
	}
}

func TestUnknownPersistedStateIsReportedAndKept(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	m := fsm.New[*gadget]("renamed", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(context.Context, *request) fsm.Result { calls.Add(1); return fsm.Done() }, fsm.Final())
	r := e.reconciler(m)
	g := e.gadget("g", v1alpha1.GadgetSpec{})
	g.Status.State = "OldName"
	if err := e.direct.Status().Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}

	e.reconcile(r, "g")
	g = e.get("g")
	if g.Status.State != "OldName" {
		t.Errorf("state = %q, want OldName kept", g.Status.State)
	}
	wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, fsm.ReasonUnknownState)
	if msg := condition(g, fsm.ConditionStalled).Message; !strings.Contains(msg, "OldName") || !strings.Contains(msg, "Start") {
		t.Errorf("message %q should name the unknown state and the declared ones", msg)
	}
	if calls.Load() != 0 {
		t.Error("a handler ran for an object in an unknown state")
	}
	if !slices.Contains(e.events.reasons(), fsm.ReasonUnknownState) {
		t.Errorf("no UnknownState event; events: %v", e.events.reasons())
	}
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
	e.fe.Await("the refusal and its Event", func() bool {
		return e.stalled("g") && occurrences(e.apiEvents(), fsm.ReasonIllegalTransition) > 0
	})
	time.Sleep(10 * time.Second) // and nothing after

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
	e.fe.Await("the spec change observed", func() bool {
		g := e.get("g")
		return g.Status.ObservedGeneration == g.Generation
	})
	time.Sleep(10 * time.Second) // and nothing after
	t.Logf("refused, after a spec change and 10 s more: %d handler runs, %d status writes in all", calls.count(), l.status.Load())
	if calls.count() != 2 || l.status.Load() != 2 {
		t.Errorf("after a spec change: %d handler runs and %d status writes in all, want 2 and 2", calls.count(), l.status.Load())
	}
	if g := e.get("g"); g.Status.Count != 0 || g.Status.ObservedGeneration != g.Generation {
		t.Errorf("after a spec change: count %d, observedGeneration %d of %d", g.Status.Count, g.Status.ObservedGeneration, g.Generation)
	}
}

// A stall is logged once, however long its message: the condition keeps
// the message clipped, and every later reconcile of the same stall, here
// one per spec change under a manager, compares with that.
func TestUnderManagerAStallWithALongMessageIsLoggedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long := func(name string) fsm.State { return fsm.State(name + strings.Repeat("x", 300)) }
	var calls runs
	m := fsm.New[*gadget]("renamed", fsm.Lifecycle).
		Initial(long("Start")).
		State(long("Start"), counted(&calls, next(long("Middle"))), fsm.To(long("Middle"))).
		State(long("Middle"), next(long("End")), fsm.To(long("End"))).
		State(long("End"), done, fsm.Final())
	g := e.gadget("g", v1alpha1.GadgetSpec{})
	g.Status.State = long("Old")
	if err := e.direct.Status().Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	l := run(e, m)
	for target := range int32(4) {
		if target > 0 {
			e.update(func(s *v1alpha1.GadgetSpec) { s.Target = target })
		}
		time.Sleep(2 * time.Second)
	}
	e.fe.Await("every spec change observed", func() bool {
		g := e.get("g")
		return g.Status.ObservedGeneration == g.Generation && occurrences(e.apiEvents(), fsm.ReasonUnknownState) > 0
	})

	g = e.get("g")
	wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, fsm.ReasonUnknownState)
	logged := map[string]int{}
	for _, line := range l.logs.all() {
		logged[line.msg]++
	}
	t.Logf("four generations of one stall: %d status writes, %d handler runs, logs %v", l.status.Load(), calls.count(), logged)
	if logged["unknown state"] != 1 || logged["stalled"] != 1 {
		t.Errorf("logged the unknown state %d times and the stall %d times, want once each", logged["unknown state"], logged["stalled"])
	}
	if n := occurrences(e.apiEvents(), fsm.ReasonUnknownState); n != 1 {
		t.Errorf("%d UnknownState events, want 1", n)
	}
	if calls.count() != 0 || l.status.Load() != 4 {
		t.Errorf("%d handler runs and %d status writes, want 0 and 4 (the stall, then each new generation observed)", calls.count(), l.status.Load())
	}
}

// Every condition kfsm writes takes its lastTransitionTime from the
// machine's clock, so that under a fake clock a test reads the times it
// set: the walk's conditions, a paused object's, and those of the smaller
// write that reports an unwritable status.
func TestConditionsTakeTheirTimeFromTheMachinesClock(t *testing.T) {
	e := newEnv(t)
	clock := clocktesting.NewFakePassiveClock(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	m := fsm.New[*gadget]("condition-times", fsm.Lifecycle).
		WithClock(clock).
		Initial("Start").
		State("Start", func(_ context.Context, r *request) fsm.Result {
			switch r.Object.Spec.Mode {
			case "wait":
				return fsm.Wait(time.Minute, "Waiting")
			case "huge":
				r.Object.Status.Note = strings.Repeat("x", 4<<20)
			}
			return fsm.Next("End")
		}, fsm.To("End")).
		State("End", done, fsm.Final())
	r := e.reconciler(m)
	wantTimes := func(g *v1alpha1.Gadget, types ...string) {
		t.Helper()
		for _, ct := range types {
			c := condition(g, ct)
			if c == nil {
				t.Errorf("%s: no %s condition", g.Name, ct)
			} else if want := clock.Now(); !c.LastTransitionTime.Time.Equal(want) {
				t.Errorf("%s: %s lastTransitionTime %s, want the machine's clock, %s", g.Name, ct, c.LastTransitionTime.UTC(), want)
			}
		}
	}

	e.gadget("g", v1alpha1.GadgetSpec{Mode: "wait"})
	e.reconcile(r, "g")
	wantTimes(e.get("g"), fsm.ConditionReady, fsm.ConditionReconciling)

	clock.SetTime(clock.Now().Add(time.Hour))
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "" })
	e.reconcile(r, "g")
	wantTimes(e.get("g"), fsm.ConditionReady)

	p := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: e.namespace, Annotations: map[string]string{fsm.AnnotationPaused: "true"}}}
	if err := e.direct.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, "p")
	wantTimes(e.get("p"), fsm.ConditionPaused)

	e.gadget("huge", v1alpha1.GadgetSpec{Mode: "huge"})
	if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: e.namespace, Name: "huge"}}); err == nil {
		t.Fatal("a status over the size limit was written")
	}
	wantTimes(e.get("huge"), fsm.ConditionReady, fsm.ConditionStalled)
}
