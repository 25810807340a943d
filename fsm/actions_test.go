package fsm_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// backupMachine runs action as an asynchronous "backup" in state Backup,
// then moves to Done; a failed backup fails the state.
func backupMachine(name string, action func(ctx context.Context, g string) error) *fsm.Machine[*gadget] {
	return fsm.New[*gadget](name, fsm.Lifecycle).
		Initial("Backup").
		State("Backup", func(_ context.Context, r *request) fsm.Result {
			gadgetName := r.Object.Name // the action must not keep the request
			a := r.Action("backup", func(ctx context.Context) error { return action(ctx, gadgetName) })
			switch a.State {
			case fsm.ActionPending:
				return fsm.Wait(0, "BackingUp") // no timer: only completion wakes it
			case fsm.ActionFailed:
				return fsm.Fail(a.Err)
			}
			return fsm.Next("Finished")
		}, fsm.To("Finished")).
		State("Finished", done, fsm.Final()).
		OnDelete("Released").
		State("Released", done, fsm.Final())
}

func ready(e *env, name string) bool {
	return meta.IsStatusConditionTrue(e.get(name).Status.Conditions, fsm.ConditionReady)
}

func TestActionRunsOutsideTheReconcileWorker(t *testing.T) {
	e := newEnv(t)
	var finished atomic.Bool
	release := make(chan struct{}) // held until the quick gadget is done, so that the order is certain
	m := backupMachine("actions", func(ctx context.Context, g string) error {
		if g != "slow" {
			return nil
		}
		// Two seconds at least, and until the quick gadget is done.
		for _, wait := range []<-chan struct{}{after(2 * time.Second), release} {
			select {
			case <-wait:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		finished.Store(true)
		return nil
	}).Workers(1)
	completed := metricValue(t, "kfsm_actions_completed_total", map[string]string{"machine": "actions", "action": "backup"})
	fsmtest.Run(e.fe, m)

	e.gadget("slow", v1alpha1.GadgetSpec{})
	e.fe.Await("the slow backup to start", func() bool {
		c := condition(e.get("slow"), fsm.ConditionReady)
		return c != nil && c.Reason == "BackingUp"
	})
	if got := metricValue(t, "kfsm_actions_running", map[string]string{"machine": "actions", "action": "backup"}); got != 1 {
		t.Errorf("while the backup runs, kfsm_actions_running = %v, want 1", got)
	}
	e.gadget("quick", v1alpha1.GadgetSpec{})
	e.fe.Await("the quick gadget to finish while the slow backup runs on the one worker", func() bool { return ready(e, "quick") })
	close(release)
	e.fe.Await("the slow gadget to finish", func() bool { return ready(e, "slow") })
	if !finished.Load() {
		t.Fatal("the slow gadget finished without its backup")
	}
	g := e.get("slow")
	if g.Status.State != "Finished" {
		t.Errorf("state %s, want Finished", g.Status.State)
	}
	if got := metricValue(t, "kfsm_actions_completed_total", map[string]string{"machine": "actions", "action": "backup"}) - completed; got != 2 {
		t.Errorf("kfsm_actions_completed_total grew by %v, want 2", got)
	}
	if metricExists(t, "kfsm_actions_running", map[string]string{"machine": "actions", "action": "backup"}) {
		t.Error("kfsm_actions_running keeps a series for an action that no longer runs")
	}
}

func TestFailedActionIsReportedAndRetried(t *testing.T) {
	e := newEnv(t)
	var runs atomic.Int32
	m := backupMachine("actions-fail", func(context.Context, string) error {
		if runs.Add(1) == 1 {
			return errors.New("disk full")
		}
		return nil
	})
	var seenMu sync.Mutex
	var seen []string
	m.OnAction(func(obj types.NamespacedName, name string, a fsm.Action) {
		seenMu.Lock()
		defer seenMu.Unlock()
		seen = append(seen, obj.Name+" "+name+" "+a.State.String())
	})
	failedLabels := map[string]string{"machine": "actions-fail", "action": "backup"}
	errorLabels := map[string]string{"machine": "actions-fail", "state": "Backup"}
	failed, errs := metricValue(t, "kfsm_actions_failed_total", failedLabels), metricValue(t, "kfsm_handler_errors_total", errorLabels)
	fsmtest.Run(e.fe, m)

	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the retried backup to succeed", func() bool { return ready(e, "g") })
	if runs.Load() != 2 {
		t.Errorf("the backup ran %d times, want 2: once failing, once retried", runs.Load())
	}
	if got := metricValue(t, "kfsm_actions_failed_total", failedLabels) - failed; got != 1 {
		t.Errorf("kfsm_actions_failed_total grew by %v, want 1", got)
	}
	if got := metricValue(t, "kfsm_handler_errors_total", errorLabels) - errs; got != 1 {
		t.Errorf("the failed backup failed the state %v times, want 1", got)
	}
	seenMu.Lock()
	defer seenMu.Unlock()
	if diff := cmp.Diff([]string{"g backup Pending", "g backup Failed", "g backup Pending", "g backup Succeeded"}, seen); diff != "" {
		t.Errorf("OnAction saw (-want +got):\n%s", diff)
	}
}

func TestFailedActionErrorReachesTheCondition(t *testing.T) {
	e := newEnv(t)
	m := backupMachine("actions-error", func(context.Context, string) error { return errors.New("disk full") })
	fsmtest.Run(e.fe, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the failure in the Ready condition", func() bool {
		c := condition(e.get("g"), fsm.ConditionReady)
		return c != nil && c.Reason == fsm.ReasonHandlerFailed && strings.Contains(c.Message, "disk full")
	})
}

func TestDeletionCancelsActions(t *testing.T) {
	e := newEnv(t)
	cancelled := make(chan error, 1)
	m := backupMachine("actions-cancel", func(ctx context.Context, _ string) error {
		<-ctx.Done()
		cancelled <- ctx.Err()
		return ctx.Err()
	})
	fsmtest.Run(e.fe, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the backup to start", func() bool {
		c := condition(e.get("g"), fsm.ConditionReady)
		return c != nil && c.Reason == "BackingUp"
	})
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the action ended with %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("deleting the object did not cancel its action")
	}
	e.fe.Await("the gadget to be gone", func() bool { return !e.exists(&gadget{}, "g") })
}

func TestActionRunningAtRestartIsStartedAgain(t *testing.T) {
	e := newEnv(t)
	var starts atomic.Int32
	machine := func() *fsm.Machine[*gadget] {
		return backupMachine("actions-restart", func(ctx context.Context, _ string) error {
			if starts.Add(1) == 1 {
				<-ctx.Done() // the first run is cut short by the stop
				return ctx.Err()
			}
			return nil
		})
	}
	op := fsmtest.Run(e.fe, machine())
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the backup to start", func() bool { return starts.Load() == 1 })
	op.Stop()
	if ready(e, "g") {
		t.Fatal("the gadget finished although its backup was cut short")
	}

	fsmtest.Run(e.fe, machine())
	e.fe.Await("the backup to run again and the gadget to finish", func() bool { return ready(e, "g") })
	if starts.Load() != 2 {
		t.Errorf("the backup started %d times, want 2", starts.Load())
	}
	if c := condition(e.get("g"), fsm.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}
}

// Guarantee 7 with the documented action pattern (Wait while the action
// is pending, Fail when it failed): the Wait between two failed attempts
// does not reset the count, so a backup that always fails is started
// exactly three times, after backoffs of 1 s and 2 s, and RetriesThen
// moves the gadget on after the third failure. The attempts a handler
// sees count the failures: 1, 2, 3.
func TestAnActionThatAlwaysFailsExhaustsItsRetries(t *testing.T) {
	e := newEnv(t)
	var calls runs
	var attemptsMu sync.Mutex
	var attempts []int
	m := fsm.New[*gadget]("actions-exhaust", fsm.Lifecycle).
		Initial("Backup").
		State("Backup", func(_ context.Context, r *request) fsm.Result {
			a := r.Action("backup", func(context.Context) error {
				calls.record(&request{Object: &gadget{}})
				return errors.New("the object store refuses uploads")
			})
			switch a.State {
			case fsm.ActionPending:
				attemptsMu.Lock()
				attempts = append(attempts, r.Attempt)
				attemptsMu.Unlock()
				return fsm.Wait(0, "BackingUp")
			case fsm.ActionFailed:
				return fsm.Fail(a.Err)
			}
			return fsm.Next("Finished")
		}, fsm.To("Finished"), fsm.RetriesThen(3, "GaveUp")).
		State("Finished", done, fsm.Final()).
		State("GaveUp", done, fsm.Final())
	fsmtest.Run(e.fe, m)

	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to give up", func() bool { return e.get("g").Status.State == "GaveUp" })
	time.Sleep(3 * time.Second) // and no call after
	wantAttemptsAt(t, calls.times(), 0, 1, 3)
	attemptsMu.Lock()
	defer attemptsMu.Unlock()
	if diff := cmp.Diff([]int{1, 2, 3}, attempts); diff != "" {
		t.Errorf("Request.Attempt of the runs that started the backup (-want +got):\n%s", diff)
	}
	if h := e.get("g").Status.History; len(h) == 0 || h[len(h)-1].Reason != fsm.ReasonRetriesExhausted {
		t.Errorf("history %+v, want the move to GaveUp by %s last", h, fsm.ReasonRetriesExhausted)
	}
}

// after is time.After as a channel of struct{}.
func after(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}
