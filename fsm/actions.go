package fsm

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm/internal/action"
)

// ActionState is where an asynchronous action stands.
type ActionState int

const (
	// ActionPending: the action's intent is recorded, and it runs or is
	// about to.
	ActionPending ActionState = iota + 1
	// ActionSucceeded: the action's work returned nil.
	ActionSucceeded
	// ActionFailed: the action's work returned an error or panicked; see
	// Action.Err.
	ActionFailed
	// ActionIndeterminate: the action's run was lost before its outcome
	// was recorded, and it declares neither Observe nor Idempotent. kfsm
	// does not run it again: unless the handler moves on or stops, the
	// object is Stalled with reason ActionIndeterminate.
	ActionIndeterminate
)

func (s ActionState) String() string {
	if names := [...]string{"Pending", "Succeeded", "Failed", "Indeterminate"}; s > 0 && int(s) <= len(names) {
		return names[s-1]
	}
	return fmt.Sprintf("ActionState(%d)", int(s))
}

// Action is what [Request.Action] reports about an asynchronous action.
type Action struct {
	State ActionState
	// Err is the action's error when it failed.
	Err error
	// Key names this run of the action, as Status.Actions records it.
	Key string
	// Result is what a succeeded action's work set in ActionRun.Result.
	Result string
	// Progress is the action's last checkpoint.
	Progress string
}

// ActionFunc is an action's work.
type ActionFunc func(ctx context.Context, run *ActionRun) error

// ActionRun is what an action's work, or its Observe function, gets.
type ActionRun struct {
	// Key names this run of the action. It stays the same when the run
	// is resumed after a restart, a failover or a slot handed over, and
	// when it is retried after a failure: send it as an idempotency key
	// to the system that the action changes.
	Key string
	// Attempt is the handler's attempt that started the action.
	Attempt int
	// Progress is the last checkpoint: empty at the first start, and what
	// Checkpoint saved last when the run resumes.
	Progress string
	// Result is what the work hands back when it succeeds, recorded in
	// the status with the outcome: at most 1024 bytes.
	Result string

	handle *action.Handle
}

// Checkpoint saves progress, at most 1024 bytes, in the object's status
// and returns once it is written: a run that resumes the action gets it
// as Progress. It also counts as a heartbeat.
func (r *ActionRun) Checkpoint(ctx context.Context, progress string) error {
	if len(progress) > maxActionText {
		return fmt.Errorf("a checkpoint of %d bytes is over the bound of %d", len(progress), maxActionText)
	}
	return r.handle.Checkpoint(ctx, progress)
}

// ActionOption declares how an action may be resumed, and bounds it.
type ActionOption func(*actionOptions)

type actionOptions struct {
	kind                string
	idempotent          bool
	observe             func(context.Context, *ActionRun) (bool, error)
	deadline, heartbeat time.Duration
}

// Idempotent declares that the action's work may run again under the same
// key, as when it sends ActionRun.Key as an idempotency key: kfsm resumes
// an interrupted run by running the work again, with the last checkpoint,
// as it retries a failed one.
func Idempotent() ActionOption { return func(o *actionOptions) { o.idempotent = true } }

// Observe declares how to tell whether an interrupted or failed run took
// effect: observe checks the system the action changes, by ActionRun.Key,
// and reports done (then the action succeeded, with the Result observe
// sets) or not done (then the work runs again, with the last checkpoint).
// kfsm asks it before it resumes a run lost to a restart and before it
// retries a run whose work returned an error, since an error can come
// after the effect (an answer lost, a timeout). An error means it cannot
// tell yet: kfsm asks again after a backoff, and never runs the work
// meanwhile.
func Observe(observe func(ctx context.Context, run *ActionRun) (done bool, err error)) ActionOption {
	return func(o *actionOptions) { o.observe = observe }
}

// Deadline bounds the action: its context ends d after its intent was
// recorded, across restarts. Work that returns an error then fails.
func Deadline(d time.Duration) ActionOption { return func(o *actionOptions) { o.deadline = d } }

// Heartbeat records a heartbeat in the status about every d while the
// action runs, so that a reader tells a slow action from a lost one. Each
// heartbeat is a status write.
func Heartbeat(d time.Duration) ActionOption { return func(o *actionOptions) { o.heartbeat = d } }

// ActionKind names what the action does, such as "backup", for its metrics: the
// runs of one kind share the series of kfsm_actions_running,
// kfsm_actions_completed_total and kfsm_actions_failed_total, labelled
// action="backup", whatever the names that the handler gives them at run
// time ("backup-" and an ID). Give a constant. Without it, the kind is the
// state that started the action: a name made at run time never makes a
// series of its own.
func ActionKind(kind string) ActionOption { return func(o *actionOptions) { o.kind = kind } }

// action is Request.Action.
func (w *walker[T]) action(name string, work ActionFunc, opts []ActionOption) Action {
	var o actionOptions
	for _, opt := range opts {
		opt(&o)
	}
	k := action.Key{Object: client.ObjectKeyFromObject(w.obj), Name: name}
	attempt := int32(w.req.Attempt)
	if i := slices.IndexFunc(w.st.Actions, func(a ActionRecord) bool { return a.Name == name }); i >= 0 {
		rec := &w.st.Actions[i]
		known := rec.Outcome == "" && w.take(k, rec)
		switch {
		case rec.Outcome != "":
			// Told once: the handler's answer to it is written with the
			// record's change, in one write.
			a := w.reported(k, rec)
			if a.State == ActionFailed {
				// The record of a failed run becomes the intent of its
				// retry: a failure may come after the effect (an answer
				// lost, a timeout), so the next run keeps the key and,
				// with Observe, asks first. The error stays until that
				// run starts.
				rec.Outcome, rec.Ended, rec.Result = "", nil, ""
			} else {
				w.setActions(slices.Delete(w.st.Actions, i, i+1))
			}
			return a
		case known:
			return Action{State: ActionPending, Key: rec.Key, Progress: rec.Progress}
		case !w.retrying && rec.State == w.req.State:
			failed := rec.Error != ""
			if !failed && !o.idempotent && o.observe == nil {
				lost := *rec
				w.indeterminate = &lost
				return Action{State: ActionIndeterminate, Key: rec.Key, Progress: rec.Progress}
			}
			if failed {
				// The retry of a failed run: a run of its own under the
				// same key, from now.
				rec.Error, rec.Started = "", metav1.NewMicroTime(w.now)
			}
			w.prepare(k, rec, work, o, true)
			return Action{State: ActionPending, Key: rec.Key, Progress: rec.Progress}
		}
		// An indeterminate action that a person asked to run again: a new
		// intent replaces the record.
		w.setActions(slices.Delete(w.st.Actions, i, i+1))
	}
	switch {
	case name == "" || len(name) > maxName:
		return Action{State: ActionFailed, Err: fmt.Errorf("an action's name must have 1 to %d bytes, not %d", maxName, len(name))}
	case len(w.st.Actions) >= maxActions:
		return Action{State: ActionFailed, Err: fmt.Errorf("action %q would be the state's action number %d, over the bound of %d", name, len(w.st.Actions)+1, maxActions)}
	}
	w.st.Actions = append(w.st.Actions, ActionRecord{
		Name: name, Key: recordKey(w.obj.GetUID(), w.req.State, name, attempt, w.obj.GetResourceVersion()),
		State: w.req.State, Attempt: attempt, Started: metav1.NewMicroTime(w.now),
	})
	rec := &w.st.Actions[len(w.st.Actions)-1]
	w.prepare(k, rec, work, o, false)
	return Action{State: ActionPending, Key: rec.Key}
}

// recordKey derives a record's key. The resourceVersion of the copy that
// the intent's walk read tells apart the entries of one state.
func recordKey(uid types.UID, state State, name string, attempt int32, version string) string {
	sum := sha256.Sum256([]byte(string(uid) + "\x00" + string(state) + "\x00" + name + "\x00" + strconv.Itoa(int(attempt)) + "\x00" + version))
	return hex.EncodeToString(sum[:16])
}

// reported is a record's outcome, with the run's own error while this
// process still has it.
func (w *walker[T]) reported(k action.Key, rec *ActionRecord) Action {
	a := Action{State: ActionSucceeded, Key: rec.Key, Result: rec.Result, Progress: rec.Progress}
	if rec.Outcome == ActionFailed.String() {
		a.State, a.Err = ActionFailed, errors.New(rec.Error)
		if v, ok := w.r.actions.Take(k, rec.Key); ok && v.Err != nil {
			a.Err = v.Err
		}
	}
	return a
}

// prepare has the pool start the action's run once the walk that records
// its intent is written. A resumed run observes first, if it may.
func (w *walker[T]) prepare(k action.Key, rec *ActionRecord, work ActionFunc, o actionOptions, resumed bool) {
	base := ActionRun{Key: rec.Key, Attempt: int(rec.Attempt), Progress: rec.Progress}
	// with calls f with a run of its own, and hands its Result to h.
	with := func(h *action.Handle, f func(*ActionRun)) {
		run := base
		run.handle = h
		f(&run)
		h.Result = run.Result
	}
	job := action.Job{
		Work: func(ctx context.Context, h *action.Handle) (err error) {
			with(h, func(run *ActionRun) { err = work(ctx, run) })
			return err
		},
		Heartbeat: o.heartbeat,
		Kind:      cmp.Or(o.kind, string(rec.State)),
	}
	if resumed && o.observe != nil {
		job.Observe = func(ctx context.Context, h *action.Handle) (done bool, err error) {
			with(h, func(run *ActionRun) { done, err = o.observe(ctx, run) })
			return done, err
		}
	}
	if o.deadline > 0 {
		job.Deadline = time.Now().Add(rec.Started.Add(o.deadline).Sub(w.now))
	}
	job.Progress = rec.Progress
	w.r.actions.Prepare(k, w.obj.GetUID(), rec.Key, w.deleting, job)
}

// take brings what this process knows of a record's run into the record,
// and reports whether it knows the run.
func (w *walker[T]) take(k action.Key, rec *ActionRecord) bool {
	v, ok := w.r.actions.Take(k, rec.Key)
	if !ok {
		return false
	}
	// As the status keeps it, to the microsecond: an unchanged beat is no
	// change to write.
	if beat := v.Beat.Truncate(time.Microsecond); !beat.IsZero() && (rec.Heartbeat == nil || !rec.Heartbeat.Time.Equal(beat)) {
		rec.Heartbeat = &metav1.MicroTime{Time: beat}
	}
	rec.Progress = v.Progress
	if !v.Ended {
		return true
	}
	rec.Outcome, rec.Ended = ActionSucceeded.String(), &metav1.MicroTime{Time: w.now}
	switch {
	case v.Err != nil:
		rec.Outcome, rec.Error = ActionFailed.String(), w.r.errorText(v.Err)
	case len(v.Result) > maxActionText:
		rec.Outcome, rec.Error = ActionFailed.String(), fmt.Sprintf("the action's result of %d bytes is over the bound of %d", len(v.Result), maxActionText)
	default:
		rec.Result = v.Result
	}
	return true
}

// takeActions brings what this process knows of the runs of the
// object's actions into their records, before any handler runs.
func (w *walker[T]) takeActions() {
	for i := range w.st.Actions {
		if rec := &w.st.Actions[i]; rec.Outcome == "" {
			w.take(action.Key{Object: client.ObjectKeyFromObject(w.obj), Name: rec.Name}, rec)
		}
	}
}

// leaveActions drops the records of the actions of a state that the
// object leaves; their runs are cancelled once the walk is written.
func (w *walker[T]) leaveActions(state State) {
	w.setActions(slices.DeleteFunc(w.st.Actions, func(rec ActionRecord) bool {
		if rec.State != state {
			return false
		}
		w.r.actions.Leave(action.Key{Object: client.ObjectKeyFromObject(w.obj), Name: rec.Name})
		return true
	}))
}

// dropEndedActions drops the records of the state's actions that ended,
// or failed and wait for a retry, once its handler converged without
// asking about them: nothing waits on them any more.
func (w *walker[T]) dropEndedActions(state State) {
	w.setActions(slices.DeleteFunc(w.st.Actions, func(rec ActionRecord) bool {
		return rec.State == state && (rec.Outcome != "" || rec.Error != "")
	}))
}

// setActions sets the records of the actions: nil when there are none, as
// the API server returns them.
func (w *walker[T]) setActions(recs []ActionRecord) {
	w.st.Actions = recs
	if len(recs) == 0 {
		w.st.Actions = nil
	}
}

// indeterminateStop is the Stop of a handler that left an indeterminate
// action as it was.
func indeterminateStop(rec *ActionRecord) Result {
	return Stop(ReasonActionIndeterminate, "action "+rec.Name+" (key "+rec.Key+") was running when its run was lost (a restart, a failover or a slot handed over), and whether it took effect is unknown: kfsm does not run it again blindly. Declare fsm.Observe or fsm.Idempotent for it, or check by hand and annotate "+AnnotationRetry+" to run it again")
}

// actionChanged tells the machine's Action observers of a run's start
// and end.
func actionChanged(watch []func(types.NamespacedName, string, Action)) func(action.Key, string, bool, error) {
	if len(watch) == 0 {
		return nil
	}
	return func(k action.Key, key string, ended bool, err error) {
		a := Action{State: ActionPending, Key: key}
		switch {
		case ended && err != nil:
			a.State, a.Err = ActionFailed, err
		case ended:
			a.State = ActionSucceeded
		}
		for _, observe := range watch {
			observe(k.Object, k.Name, a)
		}
	}
}
