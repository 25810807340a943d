package fsm_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

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
	e.fe.Await("the gadget to be Ready, and the Event of the retry", func() bool {
		return e.ready("g") && occurrences(e.apiEvents(), fsm.ReasonRetryRequested) > 0
	})
	time.Sleep(time.Second) // and nothing after
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
