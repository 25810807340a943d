package fsm_test

import (
	"testing"
	"time"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

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
