package fsmtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

type request = fsm.Request[*v1alpha1.Gadget]

const (
	Pending  fsm.State = "Pending"
	Working  fsm.State = "Working"
	TimedOut fsm.State = "TimedOut"
	Finished fsm.State = "Finished"
	Cleanup  fsm.State = "Cleanup"
)

// worker waits in Working for the spec to say "finish"; it gives up after
// half an hour.
func worker(name string) *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget](name, fsm.Lifecycle).
		Initial(Pending).
		State(Pending, func(context.Context, *request) fsm.Result { return fsm.Next(Working) }, fsm.To(Working)).
		State(Working, func(_ context.Context, r *request) fsm.Result {
			if r.Object.Spec.Mode == "finish" {
				return fsm.Next(Finished)
			}
			return fsm.Wait(time.Hour, "Working")
		}, fsm.To(Finished), fsm.Timeout(30*time.Minute, TimedOut)).
		State(TimedOut, func(context.Context, *request) fsm.Result { return fsm.Done() }, fsm.To(Working)).
		State(Finished, nil, fsm.Final()).
		OnDelete(Cleanup).
		State(Cleanup, nil, fsm.Final())
}

// drivers runs a test once under each driver: the same scenario, the
// same assertions.
var drivers = map[string]func(*fsmtest.Env, *fsm.Machine[*v1alpha1.Gadget]){
	"Manager": func(e *fsmtest.Env, m *fsm.Machine[*v1alpha1.Gadget]) { fsmtest.Run(e, m) },
	"Step":    func(e *fsmtest.Env, m *fsm.Machine[*v1alpha1.Gadget]) { fsmtest.Steps(e, m) },
}

// gadget is the object most tests drive.
func gadget() *v1alpha1.Gadget {
	return &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
}

// A 30-minute timeout is tested in seconds: the fake clock moves it,
// under the manager as one step at a time.
func TestTimeoutWithTheFakeClock(t *testing.T) {
	for name, drive := range drivers {
		t.Run(name, func(t *testing.T) {
			e := fsmtest.New(t)
			drive(e, worker("timeout").WithClock(e.Clock))
			g := gadget()
			e.Create(g)
			e.AwaitState(g, Working)

			start := time.Now()
			e.Clock.Step(29 * time.Minute)
			time.Sleep(50 * time.Millisecond) // nothing is due: it stays
			if got := e.State(g); got != Working {
				t.Fatalf("after 29 minutes the gadget is %s, want still Working", got)
			}
			e.Clock.Step(time.Minute)
			e.AwaitState(g, TimedOut)
			if wall := time.Since(start); wall > 2*time.Second {
				t.Errorf("the 30-minute timeout took %v of wall time, want under 2s", wall)
			}

			want := []string{"Pending→Working", "Working→TimedOut (timeout)"}
			if diff := cmp.Diff(want, e.Transitions(g)); diff != "" {
				t.Errorf("transitions (-want +got):\n%s", diff)
			}
			if got := e.Runs(g, Working); got != 1 {
				t.Errorf("Working ran %d times, want 1: nothing asked for another run before the timeout", got)
			}

			e.Delete(g)
			e.AwaitGone(g)
			if got := e.Transitions(g); got[len(got)-1] != "delete→Cleanup" {
				t.Errorf("transitions end with %q, want the deletion entry", got[len(got)-1])
			}
		})
	}
}

// Retries(3) with the backoff of 1 s, 2 s, then stalled: each retry comes
// when the fake clock reaches it, not before, under either driver.
func TestRetriesWithTheFakeClock(t *testing.T) {
	for name, drive := range drivers {
		t.Run(name, func(t *testing.T) {
			e := fsmtest.New(t)
			m := fsm.New[*v1alpha1.Gadget]("retries", fsm.Lifecycle).
				Initial(Working).
				State(Working, func(context.Context, *request) fsm.Result { return fsm.Fail(errors.New("the disk is full")) }, fsm.To(Finished), fsm.Retries(3)).
				State(Finished, nil, fsm.Final()).
				WithClock(e.Clock)
			drive(e, m)
			g := gadget()
			start := time.Now()
			e.Create(g)
			e.Await("the first attempt", func() bool { return e.Runs(g, Working) == 1 })

			for attempt, backoff := range []time.Duration{time.Second, 2 * time.Second} {
				e.Clock.Step(backoff - time.Millisecond)
				time.Sleep(50 * time.Millisecond)
				if got := e.Runs(g, Working); got != attempt+1 {
					t.Fatalf("a millisecond before the backoff of %v, Working ran %d times, want %d", backoff, got, attempt+1)
				}
				e.Clock.Step(time.Millisecond)
				e.Await("the next attempt", func() bool { return e.Runs(g, Working) == attempt+2 })
			}
			e.AwaitCondition(g, fsm.ConditionStalled, metav1.ConditionTrue)
			if st, _ := e.KStatus(g); st != status.FailedStatus {
				t.Errorf("kstatus says %s, want Failed", st)
			}
			e.Clock.Step(time.Hour)
			time.Sleep(50 * time.Millisecond)
			if got := e.Runs(g, Working); got != 3 {
				t.Errorf("Working ran %d times, want 3: stalled, it runs no more", got)
			}
			// On the real clock the backoffs alone take 3 s; a loaded
			// machine takes more than 1 s for the rest.
			if wall := time.Since(start); wall > 2*time.Second {
				t.Errorf("three attempts took %v of wall time, want under 2s: their 3 s of backoff pass on the fake clock", wall)
			}
		})
	}
}

// The step driver tells apart what a handler said.
func TestStepSaysWhatHappened(t *testing.T) {
	e := fsmtest.New(t)
	m := fsm.New[*v1alpha1.Gadget]("kinds", fsm.Lifecycle).
		Initial(Pending).
		State(Pending, func(_ context.Context, r *request) fsm.Result {
			switch r.Object.Spec.Mode {
			case "wait":
				return fsm.Wait(5*time.Minute, "Resting")
			case "fail":
				return fsm.Fail(errors.New("no"))
			case "stop":
				return fsm.Stop("Refused", "the spec asks for something impossible")
			}
			return fsm.Next(Working)
		}, fsm.To(Working)).
		State(Working, func(context.Context, *request) fsm.Result { return fsm.Done() }, fsm.To(Pending)).
		WithClock(e.Clock)
	s := fsmtest.Steps(e, m)

	tests := map[string]struct {
		mode      string
		kind      fsm.ResultKind
		states    []fsm.State
		requeue   time.Duration
		soon, err bool
	}{
		"NextThenDone": {mode: "next", kind: fsm.ResultDone, states: []fsm.State{Pending, Working}},
		"Wait":         {mode: "wait", kind: fsm.ResultWait, states: []fsm.State{Pending}, requeue: 5 * time.Minute},
		"Fail":         {mode: "fail", kind: fsm.ResultFail, states: []fsm.State{Pending}, requeue: time.Second, err: true},
		"Stop":         {mode: "stop", kind: fsm.ResultStop, states: []fsm.State{Pending}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g-" + tc.mode}, Spec: v1alpha1.GadgetSpec{Mode: tc.mode}}
			e.Create(g)
			got := s.Step(g)
			if got.Kind() != tc.kind || !cmp.Equal(got.States(), tc.states) || got.RequeueAfter != tc.requeue || (got.Err != nil) != tc.err || got.Soon != tc.soon {
				t.Errorf("Step() %v; want %s after %v, requeue %v, error %v", got, tc.kind, tc.states, tc.requeue, tc.err)
			}
		})
	}
}

// The documented action pattern, a Wait while the action is pending and
// a move once it ended, finishes under either driver: the step driver
// learns that the action ended and runs the object again, as the
// manager's queue does. The action may end at once or later, succeed or
// fail, and the handler may wait with or without a delay.
func TestAnActionFinishesUnderEitherDriver(t *testing.T) {
	const Broken fsm.State = "Broken"
	cases := map[string]struct {
		reason     string
		wait       time.Duration // of the handler's Wait while the action runs
		slow       bool          // the action ends 200 ms after the test lets it
		checkpoint bool          // the action saves a checkpoint first, which a walk records
		err        error         // the action's error
		want       fsm.State
		runs       int // of Working's handler
	}{
		"EndsAtOnce": {
			reason: "an action that ends as soon as it starts",
			want:   Finished, runs: 2,
		},
		"EndsLater": {
			reason: "an action that ends while the driver waits for it",
			slow:   true, want: Finished, runs: 2,
		},
		"WaitWithADelay": {
			reason: "a Wait with a delay of an hour on the fake clock: the action's end comes first",
			wait:   time.Hour, slow: true, want: Finished, runs: 2,
		},
		"Fails": {
			reason: "a failed action is told to the handler as a success is",
			err:    errors.New("the bucket is gone"), want: Broken, runs: 2,
		},
		"FailsWithADelay": {
			reason: "a failed action ends the Wait of an hour",
			wait:   time.Hour, slow: true, err: errors.New("the bucket is gone"), want: Broken, runs: 2,
		},
		"Checkpoints": {
			reason:     "an action whose checkpoint returns once a walk wrote it, and which ends then",
			checkpoint: true, want: Finished, runs: 3,
		},
	}
	for name, tc := range cases {
		for driver, drive := range drivers {
			t.Run(name+"/"+driver, func(t *testing.T) {
				e := fsmtest.New(t)
				release := make(chan struct{})
				if !tc.slow {
					close(release)
				}
				var told atomic.Pointer[fsm.Action] // what the handler was told last
				m := fsm.New[*v1alpha1.Gadget]("action", fsm.Lifecycle).
					Initial(Working).
					State(Working, func(_ context.Context, r *request) fsm.Result {
						a := r.Action("upload", func(ctx context.Context, run *fsm.ActionRun) error {
							if tc.checkpoint {
								if err := run.Checkpoint(ctx, "half"); err != nil {
									return err
								}
							}
							<-release
							return tc.err
						})
						switch a.State {
						case fsm.ActionPending:
							return fsm.Wait(tc.wait, "Uploading")
						case fsm.ActionFailed:
							told.Store(&a)
							return fsm.Next(Broken)
						}
						told.Store(&a)
						return fsm.Next(Finished)
					}, fsm.To(Finished, Broken)).
					State(Finished, nil, fsm.Final()).
					State(Broken, nil, fsm.Final()).
					WithClock(e.Clock)
				drive(e, m)
				g := gadget()
				e.Create(g)
				e.Await("the upload to start", func() bool { return e.Runs(g, Working) >= 1 })
				if tc.slow {
					time.AfterFunc(200*time.Millisecond, func() { close(release) })
				}
				e.AwaitState(g, tc.want)
				if got := e.Runs(g, Working); got != tc.runs {
					t.Errorf("%s: Working ran %d times, want %d: when the upload started, when it saved a checkpoint, if it did, and when it ended", tc.reason, got, tc.runs)
				}
				if a := told.Load(); a == nil || (a.Err != nil) != (tc.err != nil) || tc.err != nil && !strings.Contains(a.Err.Error(), tc.err.Error()) {
					t.Errorf("%s: the handler was told %+v; want the action's error %v", tc.reason, a, tc.err)
				}
			})
		}
	}
}

// An object that a new graph version migrates moves to its new state,
// and Transitions shows the move, marked as the migration it is, after
// the transitions of the version that put it in the old state.
func TestTransitionsShowAMigration(t *testing.T) {
	const Registered, Published fsm.State = "Registered", "Published"
	version := func(n int) *fsm.Machine[*v1alpha1.Gadget] {
		waiting := Registered
		if n == 2 {
			waiting = Published
		}
		m := fsm.New[*v1alpha1.Gadget]("migrating", fsm.Lifecycle).
			Initial(Pending).
			State(Pending, func(context.Context, *request) fsm.Result { return fsm.Next(waiting) }, fsm.To(waiting)).
			State(waiting, func(context.Context, *request) fsm.Result { return fsm.Wait(time.Hour, "Listing") }, fsm.To(Finished)).
			State(Finished, nil, fsm.Final())
		if n == 2 {
			m.Version(2, fsm.Rename(Registered, Published))
		}
		return m
	}
	upgrade := map[string]func(*fsmtest.Env) (then func()){
		"Manager": func(e *fsmtest.Env) func() {
			var upgraded atomic.Bool
			fsmtest.RunFunc(e, func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
				if upgraded.Load() {
					return version(2)
				}
				return version(1)
			})
			return func() {
				upgraded.Store(true)
				e.RestartOperator()
			}
		},
		"Step": func(e *fsmtest.Env) func() {
			fsmtest.Steps(e, version(1))
			return func() { fsmtest.Steps(e, version(2)) }
		},
	}
	for name, start := range upgrade {
		t.Run(name, func(t *testing.T) {
			e := fsmtest.New(t)
			then := start(e)
			g := gadget()
			e.Create(g)
			e.AwaitState(g, Registered)
			then()
			e.AwaitState(g, Published)
			want := []string{"Pending→Registered", "Registered→Published (migrated)"}
			if diff := cmp.Diff(want, e.Transitions(g)); diff != "" {
				t.Errorf("transitions (-want +got):\n%s", diff)
			}
		})
	}
}

// An Await that gives up while the operator waits on the fake clock
// says so, and how to move it: under a manager, the wait is otherwise
// indistinguishable from an operator that does nothing.
func TestAnAwaitOnTheFakeClockSaysHowToMoveIt(t *testing.T) {
	for name, tc := range map[string]struct {
		drive func(*fsmtest.Env, *fsm.Machine[*v1alpha1.Gadget])
		says  string
	}{
		"Manager": {drivers["Manager"], "waits on the fake clock until 00:00:01, 1s after its time now: move it with e.Clock.Step"},
		"Step":    {drivers["Step"], "the next step is due at 00:00:01, 1s from now: move the clock with e.Clock.Step"},
	} {
		t.Run(name, func(t *testing.T) { awaitOnTheFakeClock(t, tc.drive, tc.says) })
	}
}

func awaitOnTheFakeClock(t *testing.T, drive func(*fsmtest.Env, *fsm.Machine[*v1alpha1.Gadget]), says string) {
	rec := &fatalRecorder{TB: t}
	e := fsmtest.New(rec)
	e.Timeout = 2 * time.Second
	failed := false
	drive(e, fsm.New[*v1alpha1.Gadget]("hint", fsm.Lifecycle).
		Initial(Working).
		State(Working, func(context.Context, *request) fsm.Result {
			if !failed {
				failed = true
				return fsm.Fail(errors.New("the disk is full"))
			}
			return fsm.Next(Finished)
		}, fsm.To(Finished)).
		State(Finished, nil, fsm.Final()).
		WithClock(e.Clock))
	g := gadget()
	e.Create(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.AwaitState(g, Finished)
	}()
	<-done
	if !strings.Contains(rec.fatal, says) {
		t.Errorf("the Await gave up saying %q, want it to say %q", rec.fatal, says)
	}
	e.Clock.Step(time.Second)
	e.Timeout = time.Minute
	e.AwaitState(g, Finished)
}

// fatalRecorder keeps what a test would fail with, and ends the goroutine
// that failed, as Fatal does, but not the test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.Fatal(fmt.Sprintf(format, args...)) }

// Writes are counted as the API server sees them, by verb, per object.
func TestWritesAndEvents(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, worker("writes").WithClock(e.Clock))
	g := gadget()
	e.Create(g)
	e.AwaitState(g, Working)
	e.Update(g, func() { g.Spec.Mode = "finish" })
	e.AwaitState(g, Finished)

	// The finalizer patch, then one status write per reconcile that
	// changed something: created and working, then finished.
	want := fsmtest.Writes{Patch: 1, Status: 2}
	e.Await("the writes", func() bool { return e.Writes(g) == want })
	time.Sleep(300 * time.Millisecond)
	if diff := cmp.Diff(want, e.Writes(g)); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	var reasons []string
	e.Await("the events", func() bool { return len(e.Events(g)) >= 3 })
	for _, ev := range e.Events(g) {
		reasons = append(reasons, ev.Reason+" "+ev.Action)
	}
	if diff := cmp.Diff([]string{"Created Pending", "Next Working", "Next Finished"}, reasons); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// Run's manager makes its cache lean, as kfsm init's does: the handlers
// see objects without the managed fields that the API server keeps on
// each, and so does every test of an operator.
func TestRunsCacheKeepsNoManagedFields(t *testing.T) {
	e := fsmtest.New(t)
	var fields atomic.Int64
	fields.Store(-1)
	fsmtest.Run(e, fsm.New[*v1alpha1.Gadget]("lean", fsm.Lifecycle).
		Initial(Pending).
		State(Pending, func(_ context.Context, r *request) fsm.Result {
			fields.Store(int64(len(r.Object.GetManagedFields())))
			return fsm.Next(Finished)
		}, fsm.To(Finished)).
		State(Finished, nil, fsm.Final()))
	g := gadget()
	e.Create(g)
	e.AwaitState(g, Finished)
	if e.Get(g); len(g.GetManagedFields()) == 0 {
		t.Fatal("the API server keeps no managed fields of the gadget: the test would prove nothing")
	}
	if n := fields.Load(); n != 0 {
		t.Errorf("the handler saw %d managed fields on the gadget read from the operator's cache, want 0 (fsm.LeanCache drops them)", n)
	}
}
