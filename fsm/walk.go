package fsm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kfsm/kfsm/graph"
)

const (
	// soon is the requeue delay when work remains that this reconcile did
	// not do: a state entered twice, a stale cache, a write conflict.
	soon = 100 * time.Millisecond
)

// outcome is what a walk asks of Reconcile.
type outcome struct {
	requeueAfter    time.Duration
	soon            bool // requeueAfter is soon: continue, not wait
	removeFinalizer bool
	failure         *HandlerError // a handler failed: retried, or stalled when RetryAfter is zero
}

// walk runs the machine on obj in memory: it decides the state, runs the
// handlers, and sets the status, conditions and history. It does no client
// I/O of its own; handlers may. before is obj as it was read. What the walk
// makes visible waits in the walker until commit.
//
// The walker comes from the reconciler's pool; release returns it.
func (r *reconciler[T]) walk(ctx context.Context, obj, before T, deleting bool) *walker[T] {
	now := r.m.clock.Now()
	began := now // in real time, which a fake clock is not
	if _, real := r.m.clock.(clock.RealClock); !real {
		began = time.Now()
	}
	// A pooled walker is zero (release zeroes it): setting its fields one
	// by one costs less than copying a whole new walker over it.
	w := r.walkers.Get().(*walker[T])
	w.r, w.ctx, w.obj, w.before, w.st, w.deleting = r, ctx, obj, before, obj.FSMStatus(), deleting
	w.now, w.began, w.log, w.span, w.req = now, began, logf.FromContext(ctx), trace.SpanFromContext(ctx), new(Request[T])
	w.notices = w.noticeBuf[:0]
	if r.b.plan != nil {
		w.migrate()
	}
	w.out = w.walk()
	w.st.ObservedGeneration = obj.GetGeneration()
	if r.b.plan != nil {
		w.st.GraphVersion = int32(r.b.plan.Current)
	}
	return w
}

// release returns w to its reconciler's pool. Nothing of the walk may be
// used after it; the Request that its handlers got is not w's and stays.
func (w *walker[T]) release() {
	r := w.r
	w.req.w = nil
	*w = walker[T]{}
	r.walkers.Put(w)
}

func (w *walker[T]) walk() outcome {
	st, gen := w.st, w.obj.GetGeneration()
	if len(st.Actions) > 0 {
		w.takeActions()
	}
	if st.ObservedGeneration != gen {
		// A new spec deserves fresh attempts.
		st.Failures, st.RetryAt = 0, nil
	}
	if asked := w.obj.GetAnnotations()[AnnotationRetry]; asked != "" && retryMark(asked) != st.LastHandledRetry {
		st.LastHandledRetry = retryMark(asked)
		st.Failures, st.RetryAt = 0, nil
		w.retrying = true
		w.notify(corev1.EventTypeNormal, ReasonRetryRequested, "Retry", fmt.Sprintf("retrying now, as annotation %s asks (%q)", AnnotationRetry, asked), nil)
	}
	if removeCondition(&st.Conditions, ConditionPaused) {
		w.notify(corev1.EventTypeNormal, ReasonResumed, "Resume", "resumed: annotation "+AnnotationPaused+" was removed", nil)
	}
	if !w.deleting && !w.retrying && stalledForGeneration(st, gen) {
		return outcome{}
	}

	cur := w.start()
	if cur == "" {
		return outcome{}
	}
	if goal := w.r.m.goal; goal != nil && !w.deleting {
		if w.goal = goal(w.obj); w.goal != "" {
			if err := w.r.m.CheckGoal(cur, w.goal); err != nil {
				w.unreachableGoal(cur, err)
				return outcome{}
			}
		}
	}
	if wait, ok := w.backingOff(); ok {
		return outcome{requeueAfter: wait}
	}
	return w.run(cur)
}

// stalledForGeneration reports whether a handler's Stop or exhausted
// retries stalled the object at this generation: then nothing runs until
// the spec changes or a retry is asked for. The other stalls are evaluated
// again every time, so that a fixed operator picks the object up.
func stalledForGeneration(st *Status, gen int64) bool {
	c := meta.FindStatusCondition(st.Conditions, ConditionStalled)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != gen {
		return false
	}
	switch c.Reason {
	case ReasonIllegalTransition, ReasonUnknownState, ReasonGoalUnreachable, ReasonStatusWriteFailed:
		return false
	}
	return true
}

// backingOff reports how long the object still waits after a failure. A
// failed state runs again once its backoff has passed, whatever happens
// meanwhile, unless the spec changes, a retry is asked for, the deletion
// path starts or the state's timeout comes first.
func (w *walker[T]) backingOff() (time.Duration, bool) {
	at := w.st.RetryAt
	if at == nil || !w.now.Before(at.Time) {
		return 0, false
	}
	def := w.r.b.states[w.st.State]
	if def == nil || w.timedOut(def) {
		return 0, false
	}
	return w.withTimeout(def, at.Sub(w.now)), true
}

// walker holds one walk's state.
type walker[T Object] struct {
	r       *reconciler[T]
	ctx     context.Context
	obj     T
	before  T // obj as it was read
	st      *Status
	now     time.Time
	log     logr.Logger
	span    trace.Span    // ctx's
	began   time.Time     // in real time
	handled time.Duration // after began, when the last handler returned
	visited stateSet
	passed  stateSet    // pipeline: states whose handler moved on
	req     *Request[T] // one per walk, filled anew for each handler
	out     outcome

	deleting  bool  // the object is being deleted: the deletion path runs
	retrying  bool  // AnnotationRetry asked for a run now
	committed bool  // the status write went through
	calls     int32 // handlers run so far
	goal      State // the goal function's answer, if any
	// indeterminate is an action that the running handler found
	// indeterminate: a pointer, which keeps the walker in a 768-byte size class.
	indeterminate *ActionRecord
	applied       []OutputRef   // children applied in this run (lifecycle) or pass (pipeline)
	outputErr     error         // the first failed Apply or Delete of this run
	snapshot      reflect.Value // the status before the running handler, after the first

	steps []Step          // for Walk observers
	edges []graph.EdgeKey // for Walk observers

	notices   []notice  // made visible once the status is written
	noticeBuf [1]notice // room for a step's one transition; a second notice allocates
	logs      []func()
}

// start returns the state the walk begins in, or "" when nothing may run.
func (w *walker[T]) start() State {
	b := w.r.b
	switch {
	case w.deleting:
		if w.r.m.mode == Lifecycle && b.deletion[w.st.State] {
			return w.st.State
		}
		// The records of the actions that the deletion cancelled stay, for
		// the deletion path to clean up after them.
		w.took("", b.onDelete, ReasonDeleted)
		if w.r.m.mode == Lifecycle {
			w.move(b.onDelete, ReasonDeleted)
		}
		return b.onDelete
	case w.r.m.mode == Pipeline:
		return b.initial
	case w.st.State == "":
		w.move(b.initial, ReasonCreated)
		return b.initial
	}
	if _, ok := b.states[w.st.State]; !ok {
		w.unknownState()
		return ""
	}
	return w.st.State
}

// timedOut reports whether the object stayed in def's state longer than
// the state's timeout.
func (w *walker[T]) timedOut(def *stateDef[T]) bool {
	return def.timeout != nil && w.st.State == def.name && w.st.StateSince != nil &&
		w.now.Sub(w.st.StateSince.Time) >= def.timeout.After
}

// run walks from cur until a handler waits, fails, stops or is done.
func (w *walker[T]) run(cur State) outcome {
	b := w.r.b
	def := b.states[cur]
	for {
		cur = def.name
		w.visited.add(def.index)

		if w.timedOut(def) {
			next := b.states[State(def.timeout.To)]
			if done, out := w.moveOn(cur, next, ReasonTimeout); done {
				return out
			}
			def = next
			continue
		}

		attempt := int(w.st.Failures) + 1
		w.indeterminate = nil
		res := w.call(def)
		if w.indeterminate != nil && res.kind != resultNext && res.kind != resultStop {
			res = indeterminateStop(w.indeterminate)
		}
		if res.kind == resultDone {
			w.dropEndedActions(cur)
			if err := w.pruneOnDone(def); err != nil {
				res = Fail(err)
			}
		}
		var next State
		ok := res.kind == resultNext
		if ok {
			next, ok = def.choose(res)
		}
		w.step(def, attempt, res, next)
		switch res.kind {
		case resultNext:
			if !ok {
				w.discard()
				w.illegal(cur, res)
				return outcome{}
			}
			w.passed.add(def.index)
			nd := b.states[next]
			if done, out := w.moveOn(cur, nd, ReasonNext); done {
				return out
			}
			def = nd
			continue

		case resultWait:
			return w.waited(cur, def, res)
		case resultDone:
			return w.done(cur, def)
		case resultStop:
			return w.stopped(cur, res)
		default: // resultFail, or a zero Result
			err := res.err
			if res.kind != resultFail {
				err = errors.New("the handler returned an empty Result")
			}
			if done, out, next := w.failed(cur, def, err); done {
				return out
			} else if next != nil {
				def = next
				continue
			}
		}
	}
}

// waited rests the walk in cur, whose handler waits.
func (w *walker[T]) waited(cur State, def *stateDef[T], res Result) outcome {
	reason := reasonOr(res.reason, "Waiting")
	w.rest(cur, reason)
	// The failures of the state still count: a Wait is no success, and a
	// handler that waits between failed attempts (for an action it
	// started again) must exhaust its retries all the same.
	w.st.RetryAt = nil
	w.settle(cur, metav1.ConditionFalse, reason, def.waiting, true, nil)
	return outcome{requeueAfter: w.withTimeout(def, res.after)}
}

// done rests the walk in cur, whose handler is done: the object is Ready,
// or at the end of the deletion path, its finalizer goes.
func (w *walker[T]) done(cur State, def *stateDef[T]) outcome {
	w.rest(cur, ReasonDone)
	w.st.Failures, w.st.RetryAt = 0, nil
	w.settle(cur, metav1.ConditionTrue, ReasonDone, def.done, false, nil)
	if w.deleting && def.final {
		return outcome{removeFinalizer: true}
	}
	return outcome{requeueAfter: w.withTimeout(def, w.r.m.resyncAfter())}
}

// stopped rests the walk in cur, whose handler stopped: the object is
// Stalled until its generation changes.
func (w *walker[T]) stopped(cur State, res Result) outcome {
	reason := reasonOr(res.reason, "Stopped")
	w.rest(cur, reason)
	w.stall(cur, reason, w.r.redact(res.message), nil)
	return outcome{}
}

// pruneOnDone deletes the children that a Done no longer desires: those
// of the state in a lifecycle machine, those of the pass when a pipeline
// reached a final state, and all of them at the end of the deletion path.
func (w *walker[T]) pruneOnDone(def *stateDef[T]) error {
	if len(w.r.owns) == 0 && len(w.st.Outputs) == 0 {
		return nil
	}
	switch {
	case w.deleting && def.final:
		return w.prune(w.ctx, def.name, true)
	case w.r.m.mode == Lifecycle || def.final:
		return w.prune(w.ctx, def.name, false)
	}
	return nil
}

// edgeKinds names the kind of edge that each reason of a move takes.
var edgeKinds = map[string]string{
	ReasonNext:             graph.Exit.String(),
	ReasonTimeout:          graph.TimeoutExit.String(),
	ReasonRetriesExhausted: graph.RetriesExit.String(),
	ReasonDeleted:          graph.DeleteEntry,
}

// moveOn records the move from cur to next. It says to stop when next was
// already run in this reconcile, so that a state runs at most once per
// reconcile; the next reconcile, soon, continues there.
func (w *walker[T]) moveOn(cur State, nextDef *stateDef[T], reason string) (bool, outcome) {
	next := nextDef.name
	w.took(cur, next, reason)
	if len(w.st.Actions) > 0 {
		w.leaveActions(cur)
	}
	if w.r.m.mode == Lifecycle {
		w.move(next, reason)
	}
	if w.visited.has(nextDef.index) {
		w.rest(cur, reason)
		w.settle(next, metav1.ConditionFalse, ReasonProgressing, fmt.Sprintf("moved on to state %s", next), true, nil)
		return true, outcome{requeueAfter: soon, soon: true}
	}
	return false, outcome{}
}

// failed handles a failed attempt: it either stops the walk (retry after
// the backoff, or stalled) or gives the state the retries edge leads to.
func (w *walker[T]) failed(cur State, def *stateDef[T], err error) (bool, outcome, *stateDef[T]) {
	reason := failureReason(err)
	msg := w.r.errorText(err)
	w.rest(cur, reason) // first: a pipeline resting somewhere new starts counting afresh
	w.st.Failures++
	w.r.b.metrics.HandlerError(string(cur))
	w.notify(corev1.EventTypeWarning, reason, string(cur), fmt.Sprintf("state %s failed (attempt %d): %s", cur, w.st.Failures, msg), related(err))
	f := &HandlerError{State: cur, Attempt: int(w.st.Failures), Err: w.r.redactedError(err)}

	if def.retries != nil && int(w.st.Failures) >= def.retries.Limit {
		w.st.RetryAt = nil
		if def.retries.To != "" {
			next := w.r.b.states[State(def.retries.To)]
			if done, out := w.moveOn(cur, next, ReasonRetriesExhausted); done {
				return true, out, nil
			}
			return false, outcome{}, next
		}
		w.stall(cur, ReasonRetriesExhausted, fmt.Sprintf("state %s failed %d times: %s", cur, w.st.Failures, msg), nil)
		return true, outcome{failure: f}, nil
	}
	after := backoffAfter(w.st.Failures)
	w.st.RetryAt = &metav1.MicroTime{Time: w.now.Add(after)}
	w.settle(cur, metav1.ConditionFalse, reason, fmt.Sprintf("state %s failed: %s", cur, msg), true, nil)
	f.RetryAfter = w.withTimeout(def, after)
	return true, outcome{failure: f}, nil
}

// withTimeout shortens a requeue so that the state's timeout fires on time.
func (w *walker[T]) withTimeout(def *stateDef[T], after time.Duration) time.Duration {
	if def.timeout == nil || w.st.StateSince == nil {
		return after
	}
	left := w.st.StateSince.Add(def.timeout.After).Sub(w.now)
	if left <= 0 {
		left = soon
	}
	if after <= 0 || left < after {
		return left
	}
	return after
}

// retryMark is what Status.LastHandledRetry keeps of a value of
// AnnotationRetry: the value, or its digest if the field cannot hold it.
func retryMark(asked string) string {
	if len(asked) <= maxRetryMark {
		return asked
	}
	sum := sha256.Sum256([]byte(asked))
	return "sha256:" + hex.EncodeToString(sum[:])
}
