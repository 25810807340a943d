package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/graph"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

type (
	gadget  = v1alpha1.Gadget
	request = fsm.Request[*gadget]
)

func done(context.Context, *request) fsm.Result { return fsm.Done() }

func next(s fsm.State) fsm.Handler[*gadget] {
	return func(context.Context, *request) fsm.Result { return fsm.Next(s) }
}

func condition(g *gadget, t string) *metav1.Condition {
	return meta.FindStatusCondition(g.Status.Conditions, t)
}

// wantCondition fails unless g has condition t with the status and reason.
func wantCondition(t *testing.T, g *gadget, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := condition(g, typ)
	if c == nil {
		t.Errorf("condition %s is missing; conditions: %+v", typ, g.Status.Conditions)
		return
	}
	if c.Status != status || c.Reason != reason || c.ObservedGeneration != g.Generation {
		t.Errorf("condition %s = %s/%s (generation %d), want %s/%s (generation %d)", typ, c.Status, c.Reason, c.ObservedGeneration, status, reason, g.Generation)
	}
}

func TestConvergedObjectCostsNoWritesAndNoEvents(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("converge", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(_ context.Context, r *request) fsm.Result {
			r.Object.Status.Count = 1
			return fsm.Next("Running")
		}, fsm.To("Running")).
		State("Running", func(_ context.Context, r *request) fsm.Result {
			r.Object.Spec.Target = 42 // not kfsm's to write: must cost nothing
			return fsm.Done()
		}, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	e.reconcile(r, "g")
	g := e.get("g")
	if g.Status.State != "Running" || g.Status.Count != 1 || g.Status.ObservedGeneration != g.Generation {
		t.Fatalf("after one reconcile: state %q, count %d, observedGeneration %d", g.Status.State, g.Status.Count, g.Status.ObservedGeneration)
	}
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
	if got := e.writes.Load(); got != 1 {
		t.Errorf("the first reconcile made %d writes, want 1 (the status)", got)
	}

	e.writes.Store(0)
	eventsBefore := len(e.events.all())
	for range 100 {
		e.reconcile(r, "g")
	}
	if got := e.writes.Load(); got != 0 {
		t.Errorf("100 reconciles of a converged object made %d writes, want 0", got)
	}
	if got := len(e.events.all()) - eventsBefore; got != 0 {
		t.Errorf("100 reconciles of a converged object emitted %d events, want 0", got)
	}
}

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

// A refused transition discards the work of the handler that asked for
// it, and only that: the handler before it in the same walk moved on
// legitimately, and what it recorded stays.
func TestRefusalDiscardsOnlyTheRefusedHandlersWork(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("discard", fsm.Lifecycle).
		Initial("Prepare").
		State("Prepare", func(_ context.Context, r *request) fsm.Result {
			r.Object.Status.Note = "prepared"
			return fsm.Next("Apply")
		}, fsm.To("Apply")).
		State("Apply", func(_ context.Context, r *request) fsm.Result {
			r.Object.Status.Note = "applied"
			r.Object.Status.Count = 7
			return fsm.Next("Prepare")
		}, fsm.To("Done")).
		State("Done", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	g := e.get("g")
	if g.Status.State != "Apply" || g.Status.Note != "prepared" || g.Status.Count != 0 {
		t.Errorf("state %s, note %q, count %d; want Apply, prepared, 0", g.Status.State, g.Status.Note, g.Status.Count)
	}
	wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, fsm.ReasonIllegalTransition)
}

func TestLifecycleCyclesAcrossReconcilesEnteringEachStateOnce(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	count := func(s fsm.State) fsm.Handler[*gadget] {
		return func(context.Context, *request) fsm.Result { calls.Add(1); return fsm.Next(s) }
	}
	m := fsm.New[*gadget]("cycle", fsm.Lifecycle).
		Initial("Ping").
		State("Ping", count("Pong"), fsm.To("Pong")).
		State("Pong", count("Ping"), fsm.To("Ping"))
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	res := e.reconcile(r, "g")
	if calls.Load() != 2 {
		t.Errorf("handlers ran %d times in one reconcile, want 2 (each state once)", calls.Load())
	}
	if res.RequeueAfter <= 0 {
		t.Error("a walk cut short by a repeated state must be continued soon")
	}
	g := e.get("g")
	var path []fsm.State
	for _, h := range g.Status.History {
		path = append(path, h.To)
	}
	if diff := cmp.Diff([]fsm.State{"Ping", "Pong", "Ping"}, path); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	wantCondition(t, g, fsm.ConditionReconciling, metav1.ConditionTrue, fsm.ReasonProgressing)
}

func TestTimeoutMovesTheObjectAfterTheDeadline(t *testing.T) {
	e := newEnv(t)
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := fsm.New[*gadget]("timeout", fsm.Lifecycle).
		WithClock(clock).
		Initial("Waiting").
		State("Waiting", func(context.Context, *request) fsm.Result { return fsm.Wait(time.Minute, "Polling") },
			fsm.To("Late"), fsm.Timeout(10*time.Minute, "Late")).
		State("Late", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	if res := e.reconcile(r, "g"); res.RequeueAfter != time.Minute {
		t.Errorf("RequeueAfter = %v, want the handler's 1m", res.RequeueAfter)
	}
	clock.SetTime(clock.Now().Add(9*time.Minute + 30*time.Second))
	if res := e.reconcile(r, "g"); res.RequeueAfter != 30*time.Second {
		t.Errorf("RequeueAfter = %v, want 30s: the timeout comes before the handler's minute", res.RequeueAfter)
	}
	if g := e.get("g"); g.Status.State != "Waiting" {
		t.Fatalf("state = %q before the deadline, want Waiting", g.Status.State)
	}
	wantCondition(t, e.get("g"), fsm.ConditionReady, metav1.ConditionFalse, "Polling")

	clock.SetTime(clock.Now().Add(30 * time.Second))
	e.reconcile(r, "g")
	g := e.get("g")
	if g.Status.State != "Late" {
		t.Fatalf("state = %q after the deadline, want Late", g.Status.State)
	}
	if last := g.Status.History[len(g.Status.History)-1]; last.Reason != fsm.ReasonTimeout || last.From != "Waiting" {
		t.Errorf("last transition = %+v, want Waiting -> Late for Timeout", last)
	}
}

func TestGivingUpStallsUntilTheSpecChanges(t *testing.T) {
	cases := map[string]struct {
		reason  string
		handler fsm.Handler[*gadget]
		options []fsm.StateOption
		tries   int
		stalled string
	}{
		"ExhaustedRetries": {
			reason: "without a retries edge, the last failure stalls the object",
			handler: func(_ context.Context, r *request) fsm.Result {
				if r.Object.Spec.Mode == "broken" {
					return fsm.Fail(errors.New("the backend refused"))
				}
				return fsm.Done()
			},
			options: []fsm.StateOption{fsm.Retries(3)},
			tries:   3,
			stalled: fsm.ReasonRetriesExhausted,
		},
		"Stop": {
			reason: "a handler can give up on a generation",
			handler: func(_ context.Context, r *request) fsm.Result {
				if r.Object.Spec.Mode == "broken" {
					return fsm.Stop("BadSpec", "mode broken cannot work")
				}
				return fsm.Done()
			},
			tries:   1,
			stalled: "BadSpec",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			var calls atomic.Int32
			h := func(ctx context.Context, r *request) fsm.Result { calls.Add(1); return tc.handler(ctx, r) }
			clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			m := fsm.New[*gadget]("stall-"+strings.ToLower(name), fsm.Lifecycle).
				WithClock(clock).
				Initial("Work").
				State("Work", h, append(tc.options, fsm.To("Finished"))...).
				State("Finished", done, fsm.Final())
			r := e.reconciler(m)
			e.gadget("g", v1alpha1.GadgetSpec{Mode: "broken"})

			for i := range tc.tries {
				switch {
				case tc.stalled != fsm.ReasonRetriesExhausted:
					e.reconcile(r, "g")
				case i < tc.tries-1:
					f := e.fail(r)
					if f.RetryAfter <= 0 || f.Attempt != i+1 {
						t.Fatalf("attempt %d: failure %+v, want it retried later", i+1, f)
					}
					wantCondition(t, e.get("g"), fsm.ConditionReady, metav1.ConditionFalse, fsm.ReasonHandlerFailed)
					clock.SetTime(clock.Now().Add(f.RetryAfter))
				default:
					if f := e.fail(r); f.RetryAfter != 0 {
						t.Fatalf("the last attempt's failure %+v is not terminal", f)
					}
				}
			}
			g := e.get("g")
			wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, tc.stalled)
			stalledMetric := map[string]string{"machine": m.Name()}
			if got := metricValue(t, "kfsm_stalled_objects", stalledMetric); got != 1 {
				t.Errorf("kfsm_stalled_objects = %v, want 1", got)
			}
			if !slices.Contains(e.events.reasons(), tc.stalled) {
				t.Errorf("no %s event; events: %v", tc.stalled, e.events.reasons())
			}
			wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, tc.stalled)
			if condition(g, fsm.ConditionReconciling) != nil {
				t.Error("a stalled object must not be Reconciling")
			}

			// Stalled for this generation: nothing runs, nothing is written.
			e.writes.Store(0)
			before := calls.Load()
			if res := e.reconcile(r, "g"); res.RequeueAfter != 0 {
				t.Errorf("a stalled object was requeued after %v", res.RequeueAfter)
			}
			if calls.Load() != before || e.writes.Load() != 0 {
				t.Errorf("a stalled object ran its handler %d times and made %d writes", calls.Load()-before, e.writes.Load())
			}

			e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "fixed" })
			e.reconcile(r, "g")
			g = e.get("g")
			if condition(g, fsm.ConditionStalled) != nil || g.Status.State != "Work" || g.Status.Failures != 0 {
				t.Errorf("after a spec change: state %q, failures %d, stalled %+v; want Work, 0, none", g.Status.State, g.Status.Failures, condition(g, fsm.ConditionStalled))
			}
			wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
			if got := metricValue(t, "kfsm_stalled_objects", stalledMetric); got != 0 {
				t.Errorf("kfsm_stalled_objects = %v after the fix, want 0", got)
			}
		})
	}
}

func TestRetriesThenTakesTheRetriesEdge(t *testing.T) {
	e := newEnv(t)
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := fsm.New[*gadget]("retries-edge", fsm.Lifecycle).
		WithClock(clock).
		Initial("Flaky").
		State("Flaky", func(context.Context, *request) fsm.Result { return fsm.Fail(errors.New("flaky")) },
			fsm.To("Good"), fsm.RetriesThen(2, "Fallback")).
		State("Good", done, fsm.Final()).
		State("Fallback", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	f := e.fail(r)
	if g := e.get("g"); g.Status.State != "Flaky" || g.Status.Failures != 1 {
		t.Fatalf("after one failure: state %q, failures %d", g.Status.State, g.Status.Failures)
	}
	if res := e.reconcile(r, "g"); res.RequeueAfter != f.RetryAfter {
		t.Errorf("during the backoff: RequeueAfter = %v, want the rest of the backoff, %v", res.RequeueAfter, f.RetryAfter)
	}
	if g := e.get("g"); g.Status.Failures != 1 {
		t.Fatalf("a reconcile during the backoff ran the handler: failures %d", g.Status.Failures)
	}
	clock.SetTime(clock.Now().Add(f.RetryAfter))
	e.reconcile(r, "g")
	g := e.get("g")
	if g.Status.State != "Fallback" || g.Status.Failures != 0 {
		t.Fatalf("after two failures: state %q, failures %d; want Fallback, 0", g.Status.State, g.Status.Failures)
	}
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
}

func TestPanickingHandlerIsReportedAsAFailure(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("panic", fsm.Lifecycle).
		Initial("Boom").
		State("Boom", func(context.Context, *request) fsm.Result { panic("nil map somewhere") }, fsm.To("Fine")).
		State("Fine", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	errorsBefore := metricValue(t, "kfsm_handler_errors_total", map[string]string{"machine": "panic", "state": "Boom"})

	if f := e.fail(r); f.RetryAfter <= 0 { // must return, not panic
		t.Error("a panicking handler must be retried like a failing one")
	}
	g := e.get("g")
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, fsm.ReasonHandlerFailed)
	if msg := condition(g, fsm.ConditionReady).Message; !strings.Contains(msg, "panicked") || !strings.Contains(msg, "nil map somewhere") {
		t.Errorf("Ready message = %q, want it to say the handler panicked and why", msg)
	}
	if got := metricValue(t, "kfsm_handler_errors_total", map[string]string{"machine": "panic", "state": "Boom"}) - errorsBefore; got != 1 {
		t.Errorf("kfsm_handler_errors_total rose by %v, want 1", got)
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

func TestFinalizerIsAddedBeforeAnyHandler(t *testing.T) {
	e := newEnv(t)
	var sawFinalizer atomic.Bool
	m := fsm.New[*gadget]("finalizer-first", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			var live gadget
			if err := e.direct.Get(ctx, client.ObjectKeyFromObject(r.Object), &live); err != nil {
				return fsm.Fail(err)
			}
			sawFinalizer.Store(slices.Contains(live.Finalizers, "kfsm.dev/finalizer-first"))
			return fsm.Done()
		}, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	if !sawFinalizer.Load() {
		t.Error("the handler ran before the finalizer was stored")
	}
}

func TestMachineWithoutOnDeleteAddsNoFinalizer(t *testing.T) {
	e := newEnv(t)
	r := e.reconciler(fsm.New[*gadget]("no-finalizer", fsm.Lifecycle).Initial("Only").State("Only", done, fsm.Final()))
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	if f := e.get("g").Finalizers; len(f) != 0 {
		t.Errorf("finalizers = %v, want none", f)
	}
}

// staleReads returns the test's counting client, whose reads return the
// gadget that stale holds instead, when it holds one: a cache that lags.
func (e *env) staleReads() (client.Client, *atomic.Pointer[gadget]) {
	stale := &atomic.Pointer[gadget]{}
	return interceptor.NewClient(e.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if old := stale.Load(); old != nil {
				old.DeepCopyInto(obj.(*gadget))
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}), stale
}

func TestStaleCacheIsNotActedOn(t *testing.T) {
	e := newEnv(t)
	reads, stale := e.staleReads()
	var calls atomic.Int32
	m := fsm.New[*gadget]("stale", fsm.Lifecycle).
		Initial("Count").
		State("Count", func(_ context.Context, r *request) fsm.Result {
			calls.Add(1)
			r.Object.Status.Count++
			return fsm.Wait(0, "Counting")
		}, fsm.To("Count2")).
		State("Count2", done, fsm.Final())
	r, err := m.Reconciler(reads, e.events)
	if err != nil {
		t.Fatal(err)
	}
	old := e.gadget("g", v1alpha1.GadgetSpec{})

	e.reconcile(r, "g") // writes the status: the cache now lags behind
	stale.Store(old)
	e.writes.Store(0)
	if res := e.reconcile(r, "g"); res.RequeueAfter <= 0 {
		t.Error("a stale read must be retried soon")
	}
	if calls.Load() != 1 || e.writes.Load() != 0 {
		t.Errorf("on a stale copy the handler ran %d times (want 1 in all) and %d writes were made (want 0)", calls.Load(), e.writes.Load())
	}
	stale.Store(nil)
	e.reconcile(r, "g")
	if calls.Load() != 2 {
		t.Errorf("with a fresh copy the handler ran %d times in all, want 2", calls.Load())
	}
	if g := e.get("g"); g.Status.Count != 2 {
		t.Errorf("count = %d, want 2: each run counted once, on fresh data", g.Status.Count)
	}

}

// The mark of kfsm's last write stays: a fresh read that leads to no
// write does not make an older copy, read later, new again.
func TestStaleCopyAfterAFreshReadIsNotActedOn(t *testing.T) {
	e := newEnv(t)
	reads, stale := e.staleReads()
	var calls atomic.Int32
	m := fsm.New[*gadget]("stale-after-fresh", fsm.Lifecycle).
		Initial("Watch").
		State("Watch", func(context.Context, *request) fsm.Result {
			calls.Add(1)
			return fsm.Wait(0, "Watching") // changes nothing after the first run
		}, fsm.To("Done")).
		State("Done", done, fsm.Final())
	r, err := m.Reconciler(reads, e.events)
	if err != nil {
		t.Fatal(err)
	}
	old := e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g") // writes the status
	e.reconcile(r, "g") // reads it back, runs, writes nothing
	if calls.Load() != 2 {
		t.Fatalf("the handler ran %d times on fresh copies, want 2", calls.Load())
	}
	stale.Store(old)
	if res := e.reconcile(r, "g"); res.RequeueAfter <= 0 || calls.Load() != 2 {
		t.Errorf("on a copy older than kfsm's last write, after a fresh read: RequeueAfter %v, %d runs in all; want a retry soon and 2", res.RequeueAfter, calls.Load())
	}
}

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

// Options out of range are refused with the graph's problems, never left
// to panic in kfsm's own code later.
func TestBuildRefusesBadOptions(t *testing.T) {
	m := fsm.New[*gadget]("bad-options", fsm.Lifecycle).
		HistoryLimit(-1).
		ActionLimit(-1).
		Workers(-1).
		Resync(-time.Second).
		Initial("Start").
		State("Start", done, fsm.Final())
	err := m.Build()
	var verr *graph.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Build() = %v, want a *graph.ValidationError", err)
	}
	var found []string
	for _, p := range verr.Problems {
		if p.Code == fsm.BadOption {
			found = append(found, p.Detail)
		}
	}
	for _, option := range []string{"HistoryLimit(-1)", "ActionLimit(-1)", "Workers(-1)", "Resync(-1s)"} {
		if !slices.ContainsFunc(found, func(d string) bool { return strings.HasPrefix(d, option) }) {
			t.Errorf("Build() does not refuse %s; problems: %v", option, found)
		}
	}
	ok := fsm.New[*gadget]("zero-options", fsm.Lifecycle).HistoryLimit(0).Workers(0).
		Initial("Start").State("Start", done, fsm.Final())
	if err := ok.Build(); err != nil {
		t.Errorf("HistoryLimit(0) and Workers(0) are valid; Build() = %v", err)
	}
}

func TestBuildListsEveryProblem(t *testing.T) {
	m := fsm.New[*gadget]("broken", fsm.Pipeline).
		Initial("Start").
		State("Start", nil, fsm.To("Loop", "Nowhere")).
		State("Loop", next("Start"), fsm.To("Start")).
		State("Island", done, fsm.Final()).
		State("Ready", done, fsm.Final())
	err := m.Build()
	var verr *graph.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Build() = %v, want a *graph.ValidationError", err)
	}
	for _, code := range []graph.ProblemCode{fsm.NoHandler, fsm.BadConditionType, graph.UnknownTarget, graph.Unreachable, graph.Cycle} {
		if !verr.Has(code) {
			t.Errorf("Build() does not report %s:\n%v", code, err)
		}
	}
}

func TestDeletionInterruptsAWaitAndTheObjectGoes(t *testing.T) {
	e := newEnv(t)
	var cleaned atomic.Bool
	m := fsm.New[*gadget]("deletion", fsm.Lifecycle).
		Initial("Start").
		State("Start", next("Idle"), fsm.To("Idle")).
		State("Idle", func(context.Context, *request) fsm.Result { return fsm.Wait(0, "Idling") }, fsm.To("Done")).
		State("Done", done, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", func(context.Context, *request) fsm.Result { cleaned.Store(true); return fsm.Next("Gone") }, fsm.To("Gone")).
		State("Gone", done, fsm.Final())
	fsmtest.Run(e.fe, m)

	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to idle", func() bool { return e.get("g").Status.State == "Idle" })
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the gadget to be gone", func() bool {
		err := e.direct.Get(t.Context(), client.ObjectKey{Namespace: e.namespace, Name: "g"}, &gadget{})
		return apierrors.IsNotFound(err)
	})
	if !cleaned.Load() {
		t.Error("the deletion path did not run")
	}

	// The transitions were reported as Kubernetes events (events.k8s.io).
	e.fe.Await("transition events", func() bool {
		var list eventsv1.EventList
		if err := e.direct.List(t.Context(), &list, client.InNamespace(e.namespace)); err != nil {
			return false
		}
		for _, ev := range list.Items {
			if ev.Regarding.Name == "g" && ev.Reason == fsm.ReasonDeleted && ev.Type == corev1.EventTypeNormal {
				return true
			}
		}
		return false
	})
}

func TestRestartedManagerResumesWhereObjectsWere(t *testing.T) {
	e := newEnv(t)
	var starts atomic.Int32
	machine := func(*fsmtest.Env) *fsm.Machine[*gadget] {
		return fsm.New[*gadget]("restart", fsm.Lifecycle).
			Initial("Start").
			State("Start", func(context.Context, *request) fsm.Result { starts.Add(1); return fsm.Next("Paused") }, fsm.To("Paused")).
			State("Paused", func(_ context.Context, r *request) fsm.Result {
				if r.Object.Spec.Target < 1 {
					return fsm.Wait(0, "Paused")
				}
				return fsm.Next("Finished")
			}, fsm.To("Finished")).
			State("Finished", done, fsm.Final())
	}
	op := fsmtest.RunFunc(e.fe, machine)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to pause", func() bool { return e.get("g").Status.State == "Paused" })
	op.Restart()
	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 1 })
	e.fe.Await("the gadget to finish", func() bool { return e.get("g").Status.State == "Finished" })
	if starts.Load() != 1 {
		t.Errorf("the initial state ran %d times, want 1: the second manager must resume, not restart", starts.Load())
	}
}

func TestTransitionMetrics(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("metrics", fsm.Lifecycle).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", done, fsm.Final())
	r := e.reconciler(m)
	for _, name := range []string{"one", "two"} {
		e.gadget(name, v1alpha1.GadgetSpec{})
		e.reconcile(r, name)
	}
	if got := metricValue(t, "kfsm_transitions_total", map[string]string{"machine": "metrics", "from": "A", "to": "B"}); got != 2 {
		t.Errorf("kfsm_transitions_total{A->B} = %v, want 2", got)
	}
	if got := metricValue(t, "kfsm_objects", map[string]string{"machine": "metrics", "state": "B"}); got != 2 {
		t.Errorf("kfsm_objects{B} = %v, want 2", got)
	}
	if got := metricValue(t, "kfsm_state_duration_seconds", map[string]string{"machine": "metrics", "state": "A"}); got != 2 {
		t.Errorf("kfsm_state_duration_seconds{A} has %v observations, want 2", got)
	}
	if err := e.direct.Delete(t.Context(), e.get("one")); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, "one")
	if got := metricValue(t, "kfsm_objects", map[string]string{"machine": "metrics", "state": "B"}); got != 1 {
		t.Errorf("kfsm_objects{B} = %v after a deletion, want 1", got)
	}
}

// metricExists reports whether the registry has a series of name with
// the labels.
func metricExists(t *testing.T, name string, labels map[string]string) bool {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && slices.ContainsFunc(f.GetMetric(), func(m *dto.Metric) bool { return matches(m, labels) }) {
			return true
		}
	}
	return false
}

// metricValue reads a counter or gauge, or a histogram's sample count, from
// controller-runtime's registry.
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(labels)
}

func TestPipelineDeletionPathRemovesTheFinalizer(t *testing.T) {
	e := newEnv(t)
	var cleaned atomic.Int32
	m := fsm.New[*gadget]("pipeline-deletion", fsm.Pipeline).
		Initial("Apply").
		State("Apply", done, fsm.To("Applied")).
		State("Applied", done, fsm.Final()).
		OnDelete("Deregister").
		State("Deregister", func(context.Context, *request) fsm.Result { cleaned.Add(1); return fsm.Next("Released") }, fsm.To("Released")).
		State("Released", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	g := e.get("g")
	if !slices.Contains(g.Finalizers, m.Finalizer()) {
		t.Fatalf("finalizers = %v, want %s", g.Finalizers, m.Finalizer())
	}
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)

	if err := e.direct.Delete(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, "g")
	err := e.direct.Get(t.Context(), client.ObjectKeyFromObject(g), &gadget{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("after the deletion path: Get() = %v, want NotFound", err)
	}
	if cleaned.Load() != 1 {
		t.Errorf("the deletion handler ran %d times, want 1", cleaned.Load())
	}
}

func TestTransitionsAreLogged(t *testing.T) {
	e := newEnv(t)
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	m := fsm.New[*gadget]("logged", fsm.Lifecycle).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	ctx := logr.NewContext(t.Context(), logger)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: e.namespace, Name: "g"}}); err != nil {
		t.Fatal(err)
	}
	want := `"level"=0 "msg"="transition" "machine"="logged" "object"="` + e.namespace + `/g" "from"="A" "to"="B" "reason"="Next"`
	if !slices.Contains(lines, want) {
		t.Errorf("no log line %s; lines:\n%s", want, strings.Join(lines, "\n"))
	}
}

func TestOwnedAndWatchedObjectsTriggerReconciles(t *testing.T) {
	e := newEnv(t)
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: e.namespace, Name: name} }
	m := fsm.New[*gadget]("triggers", fsm.Lifecycle).
		Initial("Child").
		State("Child", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-child", Namespace: r.Object.Namespace}}
			if err := r.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm); apierrors.IsNotFound(err) {
				if err := ctrl.SetControllerReference(r.Object, cm, r.Client.Scheme()); err != nil {
					return fsm.Fail(err)
				}
				return failOr(r.Client.Create(ctx, cm), fsm.Wait(0, "WaitingForChild"))
			} else if err != nil {
				return fsm.Fail(err)
			}
			if cm.Data["ready"] != "yes" {
				return fsm.Wait(0, "WaitingForChild")
			}
			return fsm.Next("Referenced")
		}, fsm.To("Referenced")).
		State("Referenced", func(ctx context.Context, r *request) fsm.Result {
			var s corev1.Secret
			if err := r.Client.Get(ctx, key(r.Object.Spec.Mode), &s); err != nil {
				return fsm.Wait(0, "WaitingForSecret")
			}
			return fsm.Done()
		}, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Secret{}, func(_ context.Context, o client.Object) []ctrl.Request {
			return []ctrl.Request{{NamespacedName: key("g")}} // the gadget that names it
		})
	fsmtest.Run(e.fe, m)

	e.gadget("g", v1alpha1.GadgetSpec{Mode: "credentials"})
	var cm corev1.ConfigMap
	e.fe.Await("the child ConfigMap", func() bool { return e.direct.Get(t.Context(), key("g-child"), &cm) == nil })
	cm.Data = map[string]string{"ready": "yes"}
	if err := e.direct.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the child's change to move the gadget on", func() bool { return e.get("g").Status.State == "Referenced" })
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "credentials", Namespace: e.namespace}}
	if err := e.direct.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the secret to make the gadget Ready", func() bool {
		return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionReady)
	})
}

func failOr(err error, r fsm.Result) fsm.Result {
	if err != nil {
		return fsm.Fail(err)
	}
	return r
}

// A lifecycle machine's transitions counter has a series for each move its
// graph allows, at zero, and none for moves that cannot happen.
func TestTransitionSeriesFollowTheGraph(t *testing.T) {
	if err := tutorial().Build(); err != nil {
		t.Fatal(err)
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		if f.GetName() != "kfsm_transitions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["machine"] == "door" {
				got = append(got, fmt.Sprintf("%s→%s %s", l["from"], l["to"], l["reason"]))
			}
		}
	}
	slices.Sort(got)
	want := []string{"Closed→Open Next", "Closed→Removed Deleted", "Open→Closed Next", "Open→Closed Timeout", "Open→Removed Deleted", "→Closed Created"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series of kfsm_transitions_total{machine=door} (-want +got):\n%s", diff)
	}
}

// History keeps the latest transitions, and always the latest one, which
// Request.From reads.
func TestHistoryKeepsTheLatestTransitions(t *testing.T) {
	cases := map[string]struct {
		reason  string
		limit   int
		history []string
		from    []fsm.State
	}{
		"Two": {
			reason: "three reconciles: Ping, Pong | Ping, Pong | Ping, Pong, then Ping",
			limit:  2, history: []string{"Ping>Pong", "Pong>Ping"},
			from: []fsm.State{"", "Ping", "Pong", "Ping", "Pong", "Ping"},
		},
		"None": {
			reason: "HistoryLimit(0) keeps the latest transition all the same",
			limit:  0, history: []string{"Pong>Ping"},
			from: []fsm.State{"", "Ping", "Pong", "Ping", "Pong", "Ping"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			var from []fsm.State
			m := fsm.New[*gadget]("history-"+strings.ToLower(name), fsm.Lifecycle).
				HistoryLimit(tc.limit).
				Initial("Ping").
				State("Ping", func(_ context.Context, r *request) fsm.Result { from = append(from, r.From); return fsm.Next("Pong") }, fsm.To("Pong")).
				State("Pong", func(_ context.Context, r *request) fsm.Result { from = append(from, r.From); return fsm.Next("Ping") }, fsm.To("Ping"))
			r := e.reconciler(m)
			e.gadget("g", v1alpha1.GadgetSpec{})
			for range 3 {
				e.reconcile(r, "g")
			}
			var got []string
			for _, h := range e.get("g").Status.History {
				got = append(got, string(h.From)+">"+string(h.To))
			}
			if diff := cmp.Diff(tc.history, got); diff != "" {
				t.Errorf("%s: history (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.from, from); diff != "" {
				t.Errorf("%s: Request.From (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// A Wait after a failure ends the backoff's mark but not the count of
// the state's failures: a handler that waits between failed attempts
// still exhausts its retries (guarantee 7). Its reason is made valid.
func TestWaitKeepsFailuresAndReasonsAreMadeValid(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := fsm.New[*gadget]("wait-reason", fsm.Lifecycle).
		WithClock(clock).
		Initial("Work").
		State("Work", func(context.Context, *request) fsm.Result {
			if calls.Add(1) == 1 {
				return fsm.Fail(errors.New("not yet"))
			}
			return fsm.Wait(time.Minute, "waiting for the db")
		}, fsm.To("Finished"), fsm.Retries(2)).
		State("Finished", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	f := e.fail(r)
	if g := e.get("g"); g.Status.Failures != 1 || g.Status.RetryAt == nil {
		t.Fatalf("after one failure: failures %d, retryAt %v; want 1 and a time", g.Status.Failures, g.Status.RetryAt)
	}
	clock.SetTime(clock.Now().Add(f.RetryAfter))
	e.reconcile(r, "g")
	g := e.get("g")
	if g.Status.Failures != 1 || g.Status.RetryAt != nil {
		t.Errorf("after a Wait: failures %d, retryAt %v; want 1 and none: a Wait is no success", g.Status.Failures, g.Status.RetryAt)
	}
	// "waiting for the db" is no valid condition reason; the API server
	// would refuse the status with it.
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, "WaitingForTheDb")
}
