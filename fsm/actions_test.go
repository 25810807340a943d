package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
			a := r.Action("backup", func(ctx context.Context, _ *fsm.ActionRun) error { return action(ctx, gadgetName) }, fsm.ActionKind("backup"))
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
	}).Tune(fsm.Tuning{Workers: 1})
	completed := metricValue(t, "kfsm_actions_completed_total", map[string]string{"machine": "actions", "action": "backup"})
	timed := map[string]string{"machine": "actions", "action": "backup", "outcome": "succeeded"}
	durations := metricValue(t, "kfsm_action_duration_seconds", timed)
	fsmtest.Run(e.fe, m)

	e.gadget("slow", v1alpha1.GadgetSpec{})
	e.fe.Await("the slow backup to start", func() bool {
		c := condition(e.get("slow"), fsm.ConditionReady)
		return c != nil && c.Reason == "BackingUp"
	})
	// The gauge counts an action once it holds a slot, which its goroutine
	// takes after the reconcile that started it wrote BackingUp.
	e.fe.Await("kfsm_actions_running to count the slow backup", func() bool {
		return metricValue(t, "kfsm_actions_running", map[string]string{"machine": "actions", "action": "backup"}) == 1
	})
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
	if got := metricValue(t, "kfsm_action_duration_seconds", timed) - durations; got != 2 {
		t.Errorf("kfsm_action_duration_seconds observed %v more durations, want 2", got)
	}
	if got := metricValue(t, "kfsm_actions_running", map[string]string{"machine": "actions", "action": "backup"}); got != 0 {
		t.Errorf("once the backups ended, kfsm_actions_running = %v, want 0", got)
	}
}

// An action named at run time, such as "copy-" and the object's name, is
// counted under its kind: by default the state that started it. Its name
// makes no series of its own.
func TestActionNamesMadeAtRunTimeMakeNoSeries(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("actions-named", fsm.Lifecycle).
		Initial("Copy").
		State("Copy", func(_ context.Context, r *request) fsm.Result {
			a := r.Action("copy-"+r.Object.Name, func(context.Context, *fsm.ActionRun) error { return nil })
			if a.State == fsm.ActionPending {
				return fsm.Wait(0, "Copying")
			}
			return fsm.Next("Finished")
		}, fsm.To("Finished")).
		State("Finished", done, fsm.Final())
	fsmtest.Run(e.fe, m)
	for _, name := range []string{"a", "b", "c"} {
		e.gadget(name, v1alpha1.GadgetSpec{})
	}
	e.fe.Await("every copy to finish", func() bool { return ready(e, "a") && ready(e, "b") && ready(e, "c") })
	if got := metricValue(t, "kfsm_actions_completed_total", map[string]string{"machine": "actions-named", "action": "Copy"}); got != 3 {
		t.Errorf("kfsm_actions_completed_total{action=\"Copy\"} = %v, want 3", got)
	}
	for _, name := range []string{"copy-a", "copy-b", "copy-c"} {
		for _, metric := range []string{"kfsm_actions_completed_total", "kfsm_actions_running"} {
			if metricExists(t, metric, map[string]string{"machine": "actions-named", "action": name}) {
				t.Errorf("%s has a series for the action named %s at run time", metric, name)
			}
		}
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
	m.Observe(fsm.Observers[*gadget]{Action: func(obj types.NamespacedName, name string, a fsm.Action) {
		seenMu.Lock()
		defer seenMu.Unlock()
		seen = append(seen, obj.Name+" "+name+" "+a.State.String())
	}})
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
		t.Errorf("the Action observer saw (-want +got):\n%s", diff)
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

// The deletion path finds the record of an action that the deletion
// cancelled, without an outcome, to clean up after it by its key.
func TestTheDeletionPathFindsTheActionsItCancelled(t *testing.T) {
	e := newEnv(t)
	b := &blockFirst{}
	var seen atomic.Value
	m := durableMachine("actions-deleted", b.work).
		OnDelete("Cleanup").
		State("Cleanup", func(_ context.Context, r *request) fsm.Result {
			seen.Store(slices.Clone(r.Object.Status.Actions))
			return fsm.Done()
		}, fsm.Final())
	fsmtest.Run(e.fe, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the action's run", func() bool { return len(b.runs()) == 1 })
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the gadget to be gone", func() bool { return !e.exists(&gadget{}, "g") })
	recs, _ := seen.Load().([]fsm.ActionRecord)
	if len(recs) != 1 || recs[0].Key != b.runs()[0] || recs[0].Outcome != "" || recs[0].State != "Upload" {
		t.Errorf("the deletion path saw records %+v, want the cancelled upload's, key %s, without an outcome", recs, b.runs()[0])
	}
}

// durableMachine runs work as the action "upload" in state Upload, with
// opts, and moves to Finished when it succeeded. The handler writes the
// key it was told into the status note.
func durableMachine(name string, work fsm.ActionFunc, opts ...fsm.ActionOption) *fsm.Machine[*gadget] {
	return fsm.New[*gadget](name, fsm.Lifecycle).
		Initial("Upload").
		State("Upload", func(_ context.Context, r *request) fsm.Result {
			a := r.Action("upload", work, opts...)
			switch a.State {
			case fsm.ActionPending:
				r.Object.Status.Note = a.Key
				return fsm.Wait(0, "Uploading")
			case fsm.ActionFailed:
				return fsm.Fail(a.Err)
			case fsm.ActionIndeterminate:
				return fsm.Wait(0, "Unknown") // kfsm stalls it all the same
			}
			r.Object.Status.Note = a.Result
			return fsm.Next("Finished")
		}, fsm.To("Finished")).
		State("Finished", done, fsm.Final())
}

// blockFirst is an action's work whose first run records its key and
// blocks until it is cancelled; later runs record their key and succeed.
type blockFirst struct {
	mu   sync.Mutex
	keys []string
}

func (b *blockFirst) work(ctx context.Context, run *fsm.ActionRun) error {
	b.mu.Lock()
	b.keys = append(b.keys, run.Key)
	first := len(b.keys) == 1
	b.mu.Unlock()
	if first {
		<-ctx.Done()
		return ctx.Err()
	}
	run.Result = "uploaded"
	return nil
}

func (b *blockFirst) runs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.keys)
}

// restartMidAction starts machine() on gadget g, waits for its action's
// first run, stops the operator and starts a new one.
func restartMidAction(e *env, b *blockFirst, machine func() *fsm.Machine[*gadget]) {
	e.t.Helper()
	op := fsmtest.Run(e.fe, machine())
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the action's first run", func() bool { return len(b.runs()) == 1 })
	op.Stop()
	fsmtest.Run(e.fe, machine())
}

// The intent is on the API server before the work starts: the work reads
// the object there and finds its own key.
func TestAnActionsIntentIsWrittenBeforeItsWorkStarts(t *testing.T) {
	e := newEnv(t)
	var found atomic.Value
	m := durableMachine("actions-intent", func(ctx context.Context, run *fsm.ActionRun) error {
		g := &gadget{}
		if err := e.direct.Get(ctx, e.key("g"), g); err != nil {
			return err
		}
		found.Store(g.Status.Actions)
		if len(g.Status.Actions) != 1 || g.Status.Actions[0].Key != run.Key {
			return fmt.Errorf("the API server holds records %+v, not the intent of key %s", g.Status.Actions, run.Key)
		}
		return nil
	})
	fsmtest.Run(e.fe, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to finish", func() bool { return e.get("g").Status.State == "Finished" })
	recs, _ := found.Load().([]fsm.ActionRecord)
	if len(recs) != 1 {
		t.Fatalf("the work found records %+v", recs)
	}
	r := recs[0]
	if r.Name != "upload" || r.State != "Upload" || r.Attempt != 1 || r.Outcome != "" || len(r.Key) != 32 || r.Started.IsZero() {
		t.Errorf("the intent was %+v, want upload's in state Upload, attempt 1, a 32-digit key, a start time and no outcome", r)
	}
	if got := e.get("g").Status.Actions; got != nil {
		t.Errorf("after the state was left, the status keeps records %+v, want none", got)
	}
}

// An action lost in a restart, with neither Observe nor Idempotent, is
// not run again: the object is Stalled with the action's key, until a
// person asks for a retry.
func TestAnActionLostInARestartStallsTheObjectUntilARetry(t *testing.T) {
	e := newEnv(t)
	b := &blockFirst{}
	restartMidAction(e, b, func() *fsm.Machine[*gadget] { return durableMachine("actions-lost", b.work) })
	e.fe.Await("the gadget to stall", func() bool { return e.stalled("g") })
	key := b.runs()[0]
	c := condition(e.get("g"), fsm.ConditionStalled)
	if c.Reason != fsm.ReasonActionIndeterminate || !strings.Contains(c.Message, key) || !strings.Contains(c.Message, `upload`) {
		t.Errorf("Stalled = %s: %q, want %s naming the action and its key %s", c.Reason, c.Message, fsm.ReasonActionIndeterminate, key)
	}
	time.Sleep(time.Second)
	if got := b.runs(); len(got) != 1 {
		t.Fatalf("the lost action ran %d times, want once: kfsm must not run it again blindly", len(got))
	}

	g := e.get("g")
	metav1.SetMetaDataAnnotation(&g.ObjectMeta, fsm.AnnotationRetry, "checked-by-hand")
	if err := e.direct.Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the retried gadget to finish", func() bool { return e.get("g").Status.State == "Finished" })
	if got := b.runs(); len(got) != 2 || got[1] == key {
		t.Errorf("after the retry the action ran under keys %v, want a second run under a new key", got)
	}
}

// An Idempotent action lost in a restart runs again under the same key.
func TestAnIdempotentActionResumesUnderItsKey(t *testing.T) {
	e := newEnv(t)
	b := &blockFirst{}
	restartMidAction(e, b, func() *fsm.Machine[*gadget] { return durableMachine("actions-idem", b.work, fsm.Idempotent()) })
	e.fe.Await("the gadget to finish", func() bool { return e.get("g").Status.State == "Finished" })
	if got := b.runs(); len(got) != 2 || got[0] != got[1] {
		t.Errorf("the action ran under keys %v, want twice under one key", got)
	}
	if note := e.get("g").Status.Note; note != "uploaded" {
		t.Errorf("the handler was told result %q, want uploaded", note)
	}
}

// An action with Observe lost in a restart is observed under its key: a
// done effect ends it without running the work again; one not done runs
// the work again.
func TestAnObservedActionIsObservedBeforeItRunsAgain(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		done     bool
		wantRuns int
		wantNote string
	}{
		"Done":    {done: true, wantRuns: 1, wantNote: "found"},
		"NotDone": {done: false, wantRuns: 2, wantNote: "uploaded"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			b := &blockFirst{}
			var observed []string
			var mu sync.Mutex
			observe := fsm.Observe(func(_ context.Context, run *fsm.ActionRun) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				observed = append(observed, run.Key)
				if len(observed) == 1 {
					return false, errors.New("the store does not answer yet") // asked again after a backoff
				}
				if tc.done {
					run.Result = "found"
				}
				return tc.done, nil
			})
			restartMidAction(e, b, func() *fsm.Machine[*gadget] {
				return durableMachine("actions-observe-"+strings.ToLower(name), b.work, observe)
			})
			e.fe.Await("the gadget to finish", func() bool { return e.get("g").Status.State == "Finished" })
			key := b.runs()[0]
			mu.Lock()
			defer mu.Unlock()
			if len(observed) != 2 || observed[0] != key || observed[1] != key {
				t.Errorf("observed under keys %v, want twice (an error, then an answer) under %s", observed, key)
			}
			if got := b.runs(); len(got) != tc.wantRuns {
				t.Errorf("the work ran %d times, want %d", len(got), tc.wantRuns)
			}
			if note := e.get("g").Status.Note; note != tc.wantNote {
				t.Errorf("the handler was told result %q, want %q", note, tc.wantNote)
			}
		})
	}
}

// An action checkpointed half-way resumes from its checkpoint after a
// restart: the steps before it are not done twice.
func TestACheckpointedActionResumesFromItsCheckpoint(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	steps := map[int]int{} // step → times done
	halfway := make(chan struct{})
	var once sync.Once
	work := func(ctx context.Context, run *fsm.ActionRun) error {
		from := 0
		if run.Progress != "" {
			var err error
			if from, err = strconv.Atoi(run.Progress); err != nil {
				return err
			}
		}
		for step := from + 1; step <= 10; step++ {
			mu.Lock()
			steps[step]++
			mu.Unlock()
			if step == 5 {
				if err := run.Checkpoint(ctx, "5"); err != nil {
					return err
				}
				once.Do(func() { close(halfway) })
				<-ctx.Done() // the first run stops here, cut short by the restart
				if from == 0 {
					return ctx.Err()
				}
			}
		}
		return nil
	}
	machine := func() *fsm.Machine[*gadget] { return durableMachine("actions-checkpoint", work, fsm.Idempotent()) }
	op := fsmtest.Run(e.fe, machine())
	e.gadget("g", v1alpha1.GadgetSpec{})
	<-halfway
	if recs := e.get("g").Status.Actions; len(recs) != 1 || recs[0].Progress != "5" || recs[0].Heartbeat == nil {
		t.Fatalf("once Checkpoint returned, the status holds %+v, want progress 5 and a heartbeat", recs)
	}
	op.Stop()
	fsmtest.Run(e.fe, machine())
	e.fe.Await("the gadget to finish", func() bool { return e.get("g").Status.State == "Finished" })
	mu.Lock()
	defer mu.Unlock()
	for step := 1; step <= 10; step++ {
		if steps[step] != 1 {
			t.Errorf("step %d was done %d times, want once (all: %v)", step, steps[step], steps)
		}
	}
}

// A Heartbeat is recorded in the status while the action runs.
func TestAnActionsHeartbeatIsRecordedWhileItRuns(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	m := durableMachine("actions-heartbeat", func(ctx context.Context, _ *fsm.ActionRun) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, fsm.Heartbeat(200*time.Millisecond))
	fsmtest.Run(e.fe, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	var beats []time.Time
	e.fe.Await("three heartbeats in the status", func() bool {
		if recs := e.get("g").Status.Actions; len(recs) == 1 && recs[0].Heartbeat != nil {
			if at := recs[0].Heartbeat.Time; len(beats) == 0 || at.After(beats[len(beats)-1]) {
				beats = append(beats, at)
			}
		}
		return len(beats) >= 3
	})
	close(release)
	e.fe.Await("the gadget to finish", func() bool { return e.get("g").Status.State == "Finished" })
}

// A Deadline ends the action's context, counted from its intent.
func TestAnActionsDeadlineEndsItsContext(t *testing.T) {
	e := newEnv(t)
	m := durableMachine("actions-deadline", func(ctx context.Context, _ *fsm.ActionRun) error {
		<-ctx.Done()
		return ctx.Err()
	}, fsm.Deadline(time.Second))
	fsmtest.Run(e.fe, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the action to fail at its deadline", func() bool {
		c := condition(e.get("g"), fsm.ConditionReady)
		return c != nil && strings.Contains(c.Message, "passed its deadline") && strings.Contains(c.Message, context.DeadlineExceeded.Error())
	})
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
			a := r.Action("backup", func(context.Context, *fsm.ActionRun) error {
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

// cloud is an outside system whose first call makes its effect and loses
// the answer, as a 500 or a timeout after the effect does. It honours
// keys when told to: a call under a key it has seen makes no new effect.
type cloud struct {
	honoursKeys bool

	mu       sync.Mutex
	calls    []string // the key of each call
	effects  map[string]int
	observed []string // the key of each question
}

func (c *cloud) work(_ context.Context, run *fsm.ActionRun) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, run.Key)
	if c.effects == nil {
		c.effects = map[string]int{}
	}
	if !c.honoursKeys || c.effects[run.Key] == 0 {
		c.effects[run.Key]++
	}
	if len(c.calls) == 1 {
		return errors.New("500 Internal Server Error: the answer was lost after the effect")
	}
	run.Result = "made"
	return nil
}

func (c *cloud) observe(_ context.Context, run *fsm.ActionRun) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.observed = append(c.observed, run.Key)
	if c.effects[run.Key] > 0 {
		run.Result = "found"
		return true, nil
	}
	return false, nil
}

func (c *cloud) billed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.effects {
		n += v
	}
	return n
}

// An answer lost after the effect is an ambiguous failure: the retry that
// the handler's Fail brings keeps the run's key, and an action with
// Observe asks before it runs the work again. Each effect happens once
// when the outside system honours the key, or with Observe.
func TestARetryAfterALostAnswerKeepsTheKey(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		honoursKeys bool
		opts        func(c *cloud) []fsm.ActionOption
		wantCalls   int
		wantNote    string
		wantBilled  int
	}{
		"Idempotent": {honoursKeys: true, opts: func(*cloud) []fsm.ActionOption { return []fsm.ActionOption{fsm.Idempotent()} }, wantCalls: 2, wantNote: "made", wantBilled: 1},
		"Observe":    {opts: func(c *cloud) []fsm.ActionOption { return []fsm.ActionOption{fsm.Observe(c.observe)} }, wantCalls: 1, wantNote: "found", wantBilled: 1},
		// The work said it failed: without Observe the retry runs it
		// again, under the same key, which a system that honours keys
		// turns into no second effect.
		"Neither": {honoursKeys: true, opts: func(*cloud) []fsm.ActionOption { return nil }, wantCalls: 2, wantNote: "made", wantBilled: 1},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			c := &cloud{honoursKeys: tc.honoursKeys}
			fsmtest.Run(e.fe, durableMachine("actions-lost-answer-"+strings.ToLower(name), c.work, tc.opts(c)...))
			e.gadget("g", v1alpha1.GadgetSpec{})
			e.fe.Await("the gadget to finish", func() bool { return e.get("g").Status.State == "Finished" })
			c.mu.Lock()
			calls, observed := slices.Clone(c.calls), slices.Clone(c.observed)
			c.mu.Unlock()
			if len(calls) != tc.wantCalls || slices.Compact(slices.Clone(calls))[0] != calls[0] || len(slices.Compact(slices.Clone(calls))) != 1 {
				t.Errorf("the work ran under keys %v, want %d runs under one key", calls, tc.wantCalls)
			}
			if name == "Observe" && (len(observed) != 1 || observed[0] != calls[0]) {
				t.Errorf("Observe was asked under keys %v, want once, under the failed run's key %s", observed, calls[0])
			}
			if got := c.billed(); got != tc.wantBilled {
				t.Errorf("the cloud made %d effects, want %d", got, tc.wantBilled)
			}
			if note := e.get("g").Status.Note; note != tc.wantNote {
				t.Errorf("the handler was told result %q, want %q", note, tc.wantNote)
			}
			if recs := e.get("g").Status.Actions; recs != nil {
				t.Errorf("once the state was left, the status keeps records %+v", recs)
			}
		})
	}
}

// A state that converges without asking about an action that ended, or
// failed, wants it no more: its record is dropped with the Done, rather
// than kept in the status for as long as the object rests there.
func TestAnEndedActionThatNoOneAsksAboutIsDroppedOnDone(t *testing.T) {
	for name, fail := range map[string]bool{"Succeeded": false, "Failed": true} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			release := make(chan struct{})
			m := fsm.New[*gadget]("actions-unasked-"+strings.ToLower(name), fsm.Lifecycle).
				Initial("Serving").
				State("Serving", func(_ context.Context, r *request) fsm.Result {
					if r.Object.Spec.Mode == "skip" {
						return fsm.Done() // the job is not wanted any more
					}
					a := r.Action("job", func(ctx context.Context, _ *fsm.ActionRun) error {
						select {
						case <-release:
						case <-ctx.Done():
							return ctx.Err()
						}
						if fail {
							return errors.New("the job failed")
						}
						return nil
					})
					switch a.State {
					case fsm.ActionPending:
						return fsm.Wait(0, "Working")
					case fsm.ActionFailed:
						return fsm.Fail(a.Err)
					}
					return fsm.Done()
				}, fsm.To("Retired")).
				State("Retired", done, fsm.Final())
			fsmtest.Run(e.fe, m)
			e.gadget("g", v1alpha1.GadgetSpec{})
			e.fe.Await("the job to run", func() bool { return len(e.get("g").Status.Actions) == 1 })
			e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "skip" })
			e.fe.Await("the gadget to be Ready", func() bool { return ready(e, "g") })
			close(release)
			e.fe.Await("the ended job's record to be dropped", func() bool { return e.get("g").Status.Actions == nil })
		})
	}
}
