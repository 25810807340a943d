package fsm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	// Failed attempts back off exponentially between these bounds.
	backoffBase = time.Second
	backoffMax  = 5 * time.Minute
	// soon is the requeue delay when work remains that this reconcile did
	// not do: a state entered twice, a stale cache, a write conflict.
	soon = 100 * time.Millisecond
	// Condition messages are bounded; errors can be long.
	maxMessage = 1024
)

// reconciler runs a built machine for controller-runtime.
type reconciler[T Object] struct {
	m        *Machine[T]
	b        *built[T]
	client   client.Client
	recorder events.EventRecorder
	owns     map[schema.GroupKind]ownedType
	actions  *actions

	mu      sync.Mutex
	written map[types.NamespacedName]writeMark
	tracked map[types.NamespacedName]tracked
}

// writeMark is kfsm's last write of an object: its UID, so that an object
// deleted and created again under the same name is not mistaken for it,
// and the resourceVersion the write returned.
type writeMark struct {
	uid types.UID
	rv  uint64
}

// tracked is what the gauges count for one object.
type tracked struct {
	state   State
	stalled bool
}

func newReconciler[T Object](m *Machine[T], c client.Client, rec events.EventRecorder) (*reconciler[T], error) {
	var owns map[schema.GroupKind]ownedType
	if len(m.owns) > 0 {
		var err error
		if owns, err = resolveOwned(m.owns, c.Scheme()); err != nil {
			return nil, fmt.Errorf("machine %s: %w", m.name, err)
		}
	}
	return &reconciler[T]{
		m: m, b: m.built, client: c, recorder: rec, owns: owns,
		actions: newActions(m.name, m.actionLimit, logf.Log.WithName("kfsm")),
		written: map[types.NamespacedName]writeMark{},
		tracked: map[types.NamespacedName]tracked{},
	}, nil
}

// Reconcile reads the object, walks the machine, then writes the status
// once if it changed, and manages the finalizer around the walk.
func (r *reconciler[T]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx, span := r.b.tracer.Start(ctx, "kfsm.Reconcile", trace.WithAttributes(
		attribute.String("kfsm.machine", r.m.name),
		attribute.String("k8s.object", req.String()),
	))
	defer span.End()

	obj := newObject[T]()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			r.actions.cancel(req.NamespacedName, false)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if r.stale(obj) {
		// The cache has not seen kfsm's own last write yet; acting on it
		// would act on the past. The write's watch event is on its way.
		return reconcile.Result{RequeueAfter: soon}, nil
	}

	deleting := !obj.GetDeletionTimestamp().IsZero()
	if deleting {
		r.actions.cancel(req.NamespacedName, true)
	}
	hasFinalizer := controllerutil.ContainsFinalizer(obj, r.m.Finalizer())
	if deleting && !hasFinalizer {
		// Not ours to clean up: no deletion path, or it already ran.
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	// The results of finished actions that this reconcile reports are
	// consumed only if its writes go through.
	committed := false
	defer func() { r.actions.settle(req.NamespacedName, committed) }()
	if !deleting && r.b.onDelete != "" && !hasFinalizer {
		// Before any handler: whatever a handler creates, the deletion
		// path gets the chance to clean up.
		if err := r.patchFinalizer(ctx, obj, controllerutil.AddFinalizer); err != nil {
			return r.writeFailed(ctx, err)
		}
	}

	before := statusOf(obj.DeepCopyObject())
	out := r.walk(ctx, obj, deleting)
	if !equality.Semantic.DeepEqual(before, statusOf(obj)) {
		if err := r.client.Status().Update(ctx, obj); err != nil {
			return r.writeFailed(ctx, err)
		}
		r.wrote(obj)
		for _, t := range out.transitions {
			for _, observe := range r.m.observers {
				observe(ctx, obj, t)
			}
		}
	}
	if out.removeFinalizer {
		if err := r.patchFinalizer(ctx, obj, controllerutil.RemoveFinalizer); err != nil {
			return r.writeFailed(ctx, err)
		}
		r.forget(req.NamespacedName)
		r.actions.cancel(req.NamespacedName, false)
		return reconcile.Result{}, nil
	}
	committed = true
	r.track(req.NamespacedName, obj.FSMStatus())
	return reconcile.Result{RequeueAfter: out.requeueAfter}, nil
}

// statusOf returns the Status field of a Kubernetes object, the part kfsm
// writes, or the whole object for a type without one. Comparing only the
// status keeps a handler that touches the spec by mistake from costing a
// write on every reconcile.
func statusOf(obj runtime.Object) any {
	v := reflect.ValueOf(obj)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		if f := v.Elem().FieldByName("Status"); f.IsValid() {
			return f.Interface()
		}
	}
	return obj
}

// writeFailed turns a failed write into a result: conflicts and vanished
// objects are normal in a controller and are retried quietly.
func (r *reconciler[T]) writeFailed(ctx context.Context, err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		logf.FromContext(ctx).V(1).Info("write raced with another change; retrying", "machine", r.m.name, "error", err.Error())
		return reconcile.Result{RequeueAfter: soon}, nil
	}
	return reconcile.Result{}, err
}

func (r *reconciler[T]) patchFinalizer(ctx context.Context, obj T, change func(client.Object, string) bool) error {
	base := obj.DeepCopyObject().(T)
	change(obj, r.m.Finalizer())
	if err := r.client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(r.m.FieldOwner())); err != nil {
		return err
	}
	r.wrote(obj)
	return nil
}

// outcome is what a walk asks of Reconcile.
type outcome struct {
	requeueAfter    time.Duration
	removeFinalizer bool
	transitions     []Transition // made in the walk, for OnTransition observers
}

// walk runs the machine on obj in memory: it decides the state, runs the
// handlers, and sets the status, conditions and history. It does no client
// I/O of its own; handlers may.
func (r *reconciler[T]) walk(ctx context.Context, obj T, deleting bool) outcome {
	st := obj.FSMStatus()
	gen := obj.GetGeneration()
	w := &walker[T]{r: r, ctx: ctx, obj: obj, st: st, now: r.m.clock.Now(), log: logf.FromContext(ctx), deleting: deleting}
	out := w.walk()
	st.ObservedGeneration = gen
	out.transitions = w.moved
	return out
}

func (w *walker[T]) walk() outcome {
	st, gen := w.st, w.obj.GetGeneration()
	if st.ObservedGeneration != gen {
		// A new spec deserves fresh attempts.
		st.Failures = 0
	} else if !w.deleting && stalledForGeneration(st, gen) {
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
	return w.run(cur)
}

// stalledForGeneration reports whether a handler's Stop or exhausted
// retries stalled the object at this generation: then nothing runs until
// the spec changes. Refused transitions and unknown states are evaluated
// again every time, so that a fixed operator picks the object up.
func stalledForGeneration(st *Status, gen int64) bool {
	c := meta.FindStatusCondition(st.Conditions, ConditionStalled)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen &&
		c.Reason != ReasonIllegalTransition && c.Reason != ReasonUnknownState && c.Reason != ReasonGoalUnreachable
}

// walker holds one walk's state.
type walker[T Object] struct {
	r       *reconciler[T]
	ctx     context.Context
	obj     T
	st      *Status
	now     time.Time
	log     logr.Logger
	visited stateSet
	passed  stateSet   // pipeline: states whose handler moved on
	req     Request[T] // one per walk, filled anew for each handler

	deleting  bool         // the object is being deleted: the deletion path runs
	goal      State        // the goal function's answer, if any
	applied   []OutputRef  // children applied in this run (lifecycle) or pass (pipeline)
	outputErr error        // the first failed Apply or Delete of this run
	moved     []Transition // for OnTransition observers, when there are some
}

// start returns the state the walk begins in, or "" when nothing may run.
func (w *walker[T]) start() State {
	b := w.r.b
	switch {
	case w.deleting:
		if w.r.m.mode == Lifecycle && b.deletion[w.st.State] {
			return w.st.State
		}
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

// run walks from cur until a handler waits, fails, stops or is done.
func (w *walker[T]) run(cur State) outcome {
	b := w.r.b
	for {
		def := b.states[cur]
		w.visited.add(def.index)

		if def.timeout != nil && w.st.State == cur && w.st.StateSince != nil &&
			w.now.Sub(w.st.StateSince.Time) >= def.timeout.After {
			next := State(def.timeout.To)
			if done, out := w.moveOn(cur, next, ReasonTimeout); done {
				return out
			}
			cur = next
			continue
		}

		res := w.call(def)
		if res.kind == resultDone {
			if err := w.pruneOnDone(def); err != nil {
				res = Fail(err)
			}
		}
		switch res.kind {
		case resultNext:
			next, ok := def.choose(res)
			if !ok {
				w.illegal(cur, res)
				return outcome{}
			}
			w.passed.add(def.index)
			if done, out := w.moveOn(cur, next, ReasonNext); done {
				return out
			}
			cur = next
			continue

		case resultWait:
			reason := reasonOr(res.reason, "Waiting")
			w.rest(cur, reason)
			w.st.Failures = 0 // retries count failures in a row
			w.settle(cur, metav1.ConditionFalse, reason, def.waiting, true, nil)
			return outcome{requeueAfter: w.withTimeout(def, res.after)}

		case resultDone:
			w.rest(cur, ReasonDone)
			w.st.Failures = 0
			w.settle(cur, metav1.ConditionTrue, ReasonDone, def.done, false, nil)
			if w.deleting && def.final {
				return outcome{removeFinalizer: true}
			}
			return outcome{requeueAfter: w.withTimeout(def, w.r.m.resyncAfter())}

		case resultStop:
			w.rest(cur, reasonOr(res.reason, "Stopped"))
			w.stall(cur, reasonOr(res.reason, "Stopped"), res.message)
			return outcome{}

		default: // resultFail, or a zero Result
			err := res.err
			if res.kind != resultFail {
				err = errors.New("the handler returned an empty Result")
			}
			if done, out, next := w.failed(cur, def, err); done {
				return out
			} else if next != "" {
				cur = next
				continue
			}
		}
	}
}

// choose picks the exit that a Next takes: among the events raised, the
// exit declared first, with Default standing for the last exit. Any event
// that is not an exit makes the whole Next illegal.
func (d *stateDef[T]) choose(res Result) (State, bool) {
	best := d.exitIndex(res.next)
	for _, ev := range res.also {
		i := d.exitIndex(ev)
		if i < 0 {
			return "", false
		}
		best = min(best, i)
	}
	if best < 0 {
		return "", false
	}
	return d.exits[best], true
}

func (d *stateDef[T]) exitIndex(event State) int {
	if event == Default {
		return len(d.exits) - 1
	}
	return slices.Index(d.exits, event)
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

// moveOn records the move from cur to next. It says to stop when next was
// already run in this reconcile, so that a state runs at most once per
// reconcile; the next reconcile, soon, continues there.
func (w *walker[T]) moveOn(cur, next State, reason string) (bool, outcome) {
	if w.r.m.mode == Lifecycle {
		w.move(next, reason)
	}
	if w.visited.has(w.r.b.states[next].index) {
		w.rest(cur, reason)
		w.settle(next, metav1.ConditionFalse, ReasonProgressing, fmt.Sprintf("moved on to state %s", next), true, nil)
		return true, outcome{requeueAfter: soon}
	}
	return false, outcome{}
}

// failed handles a failed attempt: it either stops the walk (retry later,
// or stalled) or names the state the retries edge leads to.
func (w *walker[T]) failed(cur State, def *stateDef[T], err error) (bool, outcome, State) {
	w.st.Failures++
	w.r.b.metrics.handlerError(cur)
	msg := truncate(err.Error())
	reason := failureReason(err)
	w.log.Error(err, "handler failed", "state", cur, "attempt", w.st.Failures)
	w.r.recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, reason, string(cur), "state %s failed (attempt %d): %s", cur, w.st.Failures, msg)

	if def.retries != nil && int(w.st.Failures) >= def.retries.Limit {
		if def.retries.To != "" {
			next := State(def.retries.To)
			if done, out := w.moveOn(cur, next, ReasonRetriesExhausted); done {
				return true, out, ""
			}
			return false, outcome{}, next
		}
		w.rest(cur, ReasonRetriesExhausted)
		w.stall(cur, ReasonRetriesExhausted, fmt.Sprintf("state %s failed %d times in a row: %s", cur, w.st.Failures, msg))
		return true, outcome{}, ""
	}
	w.rest(cur, reason)
	w.settle(cur, metav1.ConditionFalse, reason, fmt.Sprintf("state %s failed: %s", cur, msg), true, nil)
	return true, outcome{requeueAfter: w.withTimeout(def, backoff(w.st.Failures))}, ""
}

// failureReason names a failure for conditions and events: child
// problems get reasons of their own, so that they are found by reason.
func failureReason(err error) string {
	var conflict *ConflictError
	var undeclared *UndeclaredOutputError
	switch {
	case errors.As(err, &conflict):
		return ReasonApplyConflict
	case errors.As(err, &undeclared):
		return ReasonUndeclaredOutput
	}
	return ReasonHandlerFailed
}

func backoff(failures int32) time.Duration {
	d := backoffBase
	for i := int32(1); i < failures && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
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

// call runs a state's handler in its own span, turning a panic into a
// failure. A final state without a handler is done.
func (w *walker[T]) call(def *stateDef[T]) (res Result) {
	if def.handler == nil {
		return Done()
	}
	ctx, span := w.r.b.tracer.Start(w.ctx, def.spanName)
	defer span.End()
	log := w.log
	if log.Enabled() {
		log = log.WithValues("machine", w.r.m.name, "state", def.name)
	}
	req := &w.req
	*req = Request[T]{
		Object:  w.obj,
		Client:  w.r.client,
		Log:     log,
		Clock:   w.r.m.clock,
		State:   def.name,
		From:    w.from(),
		Attempt: int(w.st.Failures) + 1,
		Goal:    w.goal,
		w:       w,
	}
	if w.goal != "" && w.goal != def.name {
		req.NextHop = w.r.b.hops[[2]State{def.name, w.goal}]
	}
	w.outputErr = nil
	if w.r.m.mode == Lifecycle {
		w.applied = w.applied[:0] // a lifecycle state desires what its latest run applied
	}
	if w.st.StateSince != nil && w.st.State == def.name {
		req.Since = w.st.StateSince.Time
	} else {
		req.Since = w.now
	}
	defer func() {
		if p := recover(); p != nil {
			w.log.Error(fmt.Errorf("%v", p), "handler panicked", "state", def.name, "stack", string(debug.Stack()))
			res = Fail(fmt.Errorf("handler panicked: %v", p))
		}
		if w.outputErr != nil && res.kind != resultFail {
			res = Fail(w.outputErr)
		}
		if res.kind == resultFail {
			span.SetStatus(codes.Error, res.err.Error())
		}
	}()
	return def.handler(ctx, req)
}

// from is the state the last transition came from.
func (w *walker[T]) from() State {
	if n := len(w.st.History); n > 0 {
		return w.st.History[n-1].From
	}
	return ""
}

// move makes next the persisted state (lifecycle, or a pipeline's resting
// state) and makes the transition visible everywhere.
func (w *walker[T]) move(next State, reason string) {
	from := w.st.State
	if from == next {
		return
	}
	mm := w.r.b.metrics
	if from != "" && w.st.StateSince != nil {
		mm.left(from, w.now.Sub(w.st.StateSince.Time).Seconds())
	}
	mm.transition(from, next)
	since := metav1.NewTime(w.now)
	if w.st.StateSince == nil {
		w.st.StateSince = &metav1.Time{}
	}
	*w.st.StateSince = since
	w.st.State, w.st.Failures = next, 0
	t := Transition{From: from, To: next, Reason: reason, Time: since}
	w.st.History = append(w.st.History, t)
	if len(w.r.m.observers) > 0 {
		w.moved = append(w.moved, t)
	}
	if over := len(w.st.History) - w.r.m.historyLimit; over > 0 {
		w.st.History = slices.Delete(w.st.History, 0, over)
	}
	if w.log.Enabled() {
		w.log.Info("transition", "machine", w.r.m.name, "object", client.ObjectKeyFromObject(w.obj).String(), "from", from, "to", next, "reason", reason)
	}
	note, ok := w.r.b.notes[[2]State{from, next}]
	if !ok {
		note = transitionNote(from, next)
	}
	w.r.recorder.Eventf(w.obj, nil, corev1.EventTypeNormal, reason, "Transition", note)
}

// rest records where a pipeline pass ended; lifecycle machines move as
// they go, so for them it changes nothing.
func (w *walker[T]) rest(cur State, reason string) {
	if w.r.m.mode == Pipeline {
		w.move(cur, reason)
	}
}

// settle sets the top-level conditions, and a pipeline's state conditions,
// for a walk that ended in state cur.
func (w *walker[T]) settle(cur State, ready metav1.ConditionStatus, reason, message string, reconciling bool, stalled *metav1.Condition) {
	gen := w.obj.GetGeneration()
	set := func(t string, s metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&w.st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: gen})
	}
	set(ConditionReady, ready, reason, message)
	if reconciling {
		set(ConditionReconciling, metav1.ConditionTrue, reason, message)
	} else {
		removeCondition(&w.st.Conditions, ConditionReconciling)
	}
	if stalled != nil {
		set(ConditionStalled, metav1.ConditionTrue, stalled.Reason, stalled.Message)
	} else {
		removeCondition(&w.st.Conditions, ConditionStalled)
	}
	if w.r.m.mode != Pipeline {
		return
	}
	for _, s := range w.r.m.states {
		switch {
		case w.passed.has(s.index):
			set(string(s.name), metav1.ConditionTrue, ReasonPassed, "")
		case s.name == cur:
			set(string(s.name), ready, reason, message)
		default:
			// Not reached in this pass: a condition left from an earlier
			// pass would tell something no longer true.
			removeCondition(&w.st.Conditions, string(s.name))
		}
	}
}

// stall marks the object Stalled, with an event the first time.
func (w *walker[T]) stall(cur State, reason, message string) {
	message = truncate(message)
	if message == "" {
		message = fmt.Sprintf("stopped in state %s", cur)
	}
	if !w.isStalled(reason, message) {
		w.log.Info("stalled", "state", cur, "reason", reason, "message", message)
		w.r.recorder.Eventf(w.obj, nil, corev1.EventTypeWarning, reason, string(cur), "stalled in state %s: %s", cur, message)
	}
	w.settle(cur, metav1.ConditionFalse, reason, message, false, &metav1.Condition{Reason: reason, Message: message})
}

func (w *walker[T]) isStalled(reason, message string) bool {
	c := meta.FindStatusCondition(w.st.Conditions, ConditionStalled)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && c.Message == message
}

// illegal refuses an undeclared transition: the state stays, and the
// object is reported so that the bug is seen.
func (w *walker[T]) illegal(cur State, res Result) {
	def := w.r.b.states[cur]
	var msg string
	if len(res.also) == 0 {
		msg = fmt.Sprintf("state %s asked to move to %s, which is not among its exits [%s]; the transition was refused", cur, res.next, joinStates(def.exits))
	} else {
		events := append([]State{res.next}, res.also...)
		bad := events[slices.IndexFunc(events, func(e State) bool { return def.exitIndex(e) < 0 })]
		msg = fmt.Sprintf("state %s raised events [%s]; %s is not among its exits [%s]; the transition was refused", cur, joinStates(events), bad, joinStates(def.exits))
	}
	if !w.isStalled(ReasonIllegalTransition, msg) {
		w.log.Error(errors.New(msg), "illegal transition", "from", cur, "to", res.next)
	}
	w.rest(cur, ReasonIllegalTransition)
	w.stall(cur, ReasonIllegalTransition, msg)
}

// unreachableGoal reports a goal that the object cannot walk to. No
// handler runs: it would be told to walk where no path leads.
func (w *walker[T]) unreachableGoal(cur State, err error) {
	msg := err.Error()
	if !w.isStalled(ReasonGoalUnreachable, msg) {
		w.log.Error(err, "unreachable goal", "state", cur, "goal", w.goal)
	}
	w.stall(cur, ReasonGoalUnreachable, msg)
}

func joinStates(states []State) string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// unknownState reports a persisted state the graph does not have, for
// example after a state was renamed. The state is kept: resetting it
// would throw away where the object really is.
func (w *walker[T]) unknownState() {
	msg := fmt.Sprintf("the object is in state %q, which machine %s does not declare (states: %s); it was left there", w.st.State, w.r.m.name, joinStates(w.r.m.stateNames()))
	if !w.isStalled(ReasonUnknownState, msg) {
		w.log.Error(errors.New(msg), "unknown state", "state", w.st.State)
	}
	w.stall(w.st.State, ReasonUnknownState, msg)
}

// stale reports whether obj is older than kfsm's last write of it.
func (r *reconciler[T]) stale(obj T) bool {
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return false // not a number: nothing to compare
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := client.ObjectKeyFromObject(obj)
	last, ok := r.written[key]
	if !ok || last.uid != obj.GetUID() {
		return false
	}
	if rv < last.rv {
		return true
	}
	delete(r.written, key) // the cache has caught up
	return false
}

func (r *reconciler[T]) wrote(obj T) {
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written[client.ObjectKeyFromObject(obj)] = writeMark{uid: obj.GetUID(), rv: rv}
}

// track keeps the objects and stalled gauges in step with obj's status.
func (r *reconciler[T]) track(key types.NamespacedName, st *Status) {
	now := tracked{state: st.State, stalled: meta.IsStatusConditionTrue(st.Conditions, ConditionStalled)}
	r.mu.Lock()
	defer r.mu.Unlock()
	was, known := r.tracked[key]
	if known && was == now {
		return
	}
	r.tracked[key] = now
	mm := r.b.metrics
	if known {
		mm.objectsIn(was.state, -1)
		if was.stalled {
			mm.stalled.Dec()
		}
	}
	mm.objectsIn(now.state, 1)
	if now.stalled {
		mm.stalled.Inc()
	}
}

func (r *reconciler[T]) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.written, key)
	was, known := r.tracked[key]
	if !known {
		return
	}
	delete(r.tracked, key)
	r.b.metrics.objectsIn(was.state, -1)
	if was.stalled {
		r.b.metrics.stalled.Dec()
	}
}

// conditionReason is the pattern metav1.Condition requires of a reason.
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// reasonOr returns reason if the API server accepts it as a condition
// reason, else a CamelCase version of it, else fallback.
func reasonOr(reason, fallback string) string {
	if conditionReason.MatchString(reason) {
		return reason
	}
	var b strings.Builder
	for _, word := range strings.FieldsFunc(reason, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		b.WriteString(strings.ToUpper(word[:1]) + word[1:])
	}
	if s := b.String(); conditionReason.MatchString(s) {
		return s
	}
	return fallback
}

// stateSet is a set of states by their index in the declaration, a bit
// each, so that a walk keeps track of states without allocating.
type stateSet struct {
	bits [2]uint64
	more map[int]bool // past 128 states
}

func (s *stateSet) add(i int) {
	if i < 128 {
		s.bits[i/64] |= 1 << (i % 64)
		return
	}
	if s.more == nil {
		s.more = map[int]bool{}
	}
	s.more[i] = true
}

func (s *stateSet) has(i int) bool {
	if i < 128 {
		return s.bits[i/64]&(1<<(i%64)) != 0
	}
	return s.more[i]
}

// removeCondition is meta.RemoveStatusCondition without its allocation
// when there is nothing to remove, the usual case.
func removeCondition(conditions *[]metav1.Condition, t string) {
	if meta.FindStatusCondition(*conditions, t) != nil {
		meta.RemoveStatusCondition(conditions, t)
	}
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage] + "…"
}
