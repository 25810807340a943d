package fsm_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

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

// A handler that runs longer than SlowHandlerAfter holds its worker; kfsm
// says so once per state, whatever the number of slow runs, and points to
// Request.Action; a quick handler before it in the same walk is not
// logged. A negative SlowHandlerAfter turns the log off. The log holds
// under a fake clock: a slow handler holds its worker in real time.
func TestUnderManagerASlowHandlerIsLoggedOncePerState(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		after time.Duration
		lines int
		clock clock.PassiveClock
	}{
		"Logged":          {after: 200 * time.Millisecond, lines: 1, clock: clock.RealClock{}},
		"LoggedFakeClock": {after: 200 * time.Millisecond, lines: 1, clock: clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		"Off":             {after: -1, lines: 0, clock: clock.RealClock{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
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
			var slowRuns runs
			m := fsm.New[*gadget]("slow-handler-"+strings.ToLower(name), fsm.Lifecycle).
				Initial("Fast").
				State("Fast", func(context.Context, *request) fsm.Result { return fsm.Next("Slow") }, fsm.To("Slow")).
				State("Slow", counted(&slowRuns, sleepy), fsm.To("Quick")).
				State("Quick", done, fsm.Final()).
				Tune(fsm.Tuning{SlowHandlerAfter: tc.after}).WithClock(tc.clock)
			fsmtest.Run(e.fe, m, fsmtest.WithManagerOptions(func(o *manager.Options) { o.Logger = log }))
			e.gadget("a", v1alpha1.GadgetSpec{})
			e.gadget("b", v1alpha1.GadgetSpec{})
			// Several slow runs: of five, one gadget's third has begun,
			// after its first two ended, each of them slow.
			e.fe.Await("five slow runs", func() bool { return slowRuns.count() >= 5 })

			logMu.Lock()
			defer logMu.Unlock()
			if len(slow) != tc.lines {
				t.Fatalf("slow-handler log lines %q, want %d", slow, tc.lines)
			}
			if tc.lines > 0 && (!strings.Contains(slow[0], `"state"="Slow"`) || !strings.Contains(slow[0], "Request.Action")) {
				t.Errorf("slow-handler log line %q does not name state Slow and Request.Action", slow[0])
			}
		})
	}
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

// Under a manager, every line a handler logs carries its machine and its
// state beside the reconcile's own values, on each walk.
func TestUnderManagerAHandlersLinesNameItsMachineAndState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ran atomic.Int64
	logging := func(next fsm.State) fsm.Handler[*gadget] {
		return func(_ context.Context, r *request) fsm.Result {
			ran.Add(1)
			r.Log.Info("handler ran", "target", r.Object.Spec.Target)
			if next == "" {
				return fsm.Done()
			}
			return fsm.Next(next)
		}
	}
	m := fsm.New[*gadget]("logging", fsm.Pipeline).
		Initial("First").
		State("First", logging("Second"), fsm.To("Second")).
		State("Second", logging(""), fsm.Final())
	l := run(e, m)
	e.fe.AwaitReady(e.gadget("g", v1alpha1.GadgetSpec{Target: 1}))
	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 2 })
	e.fe.Await("the second walk", func() bool {
		g := e.get("g")
		return g.Status.ObservedGeneration == g.Generation && meta.IsStatusConditionTrue(g.Status.Conditions, fsm.ConditionReady)
	})

	var lines []string
	for _, line := range l.logs.all() {
		if line.msg != "handler ran" {
			continue
		}
		lines = append(lines, line.String())
		if line.value("machine") != "logging" || (line.value("state") != "First" && line.value("state") != "Second") ||
			line.value("reconcileID") == "" || line.value("target") == "" {
			t.Errorf("a handler's line lacks its machine, state, reconcile or own value: %v", line)
		}
	}
	if int64(len(lines)) != ran.Load() || len(lines) < 4 {
		t.Errorf("%d handler lines for %d handler runs (at least 4: two states, two walks): %q", len(lines), ran.Load(), lines)
	}
}
