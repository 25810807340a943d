package fsm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	jsonpatch "github.com/evanphx/json-patch/v5"
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
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/echo"
	"github.com/kfsm/kfsm/fsm/internal/shard"
	"github.com/kfsm/kfsm/graph"
	"github.com/kfsm/kfsm/internal/refusal"
	"github.com/kfsm/kfsm/internal/typo"
)

const (
	// Failed attempts back off exponentially between these bounds.
	backoffBase = time.Second
	backoffMax  = 5 * time.Minute
	// soon is the requeue delay when work remains that this reconcile did
	// not do: a state entered twice, a stale cache, a write conflict.
	soon = 100 * time.Millisecond
	// clockOnly is the rate limiter's delay for a retry that a fake clock
	// times: real time never does.
	clockOnly = 24 * time.Hour
	// Condition messages are bounded; errors can be long.
	maxMessage = 1024
	// The events API refuses longer notes, actions and reasons.
	maxNote   = 1024
	maxAction = 128
	maxReason = 128
)

// reconciler runs a built machine for controller-runtime.
type reconciler[T Object] struct {
	m        *Machine[T]
	b        *built[T]
	client   client.Client
	reader   client.Reader // the API server itself, for what the cache may miss
	recorder events.EventRecorder
	gvk      schema.GroupVersionKind // of T
	gk       schema.GroupKind
	owns     map[schema.GroupKind]ownedType
	// index finds children by parent UID under a manager, for the types
	// that it indexes.
	index   *childIndex
	scopes  sync.Map // schema.GroupVersionKind → namespaced, of owned types
	actions *actions
	echoes  *echo.Marks
	limiter *backoffLimiter // set under a manager
	shards  *shard.Replica  // set when the machine is sharded
	// slowLogged holds the states whose handler was logged as slow.
	slowLogged sync.Map

	mu      sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	tracked map[types.NamespacedName]tracked
	strays  map[types.NamespacedName][]OutputRef // children that garbage collection cannot reach
	// handed is, for a sharded machine, the epoch of the object's slot
	// when this replica last checked its cache against the API server.
	handed map[types.NamespacedName]uint64
}

// tracked is what the gauges count for one object.
type tracked struct {
	uid                  types.UID
	state                State
	stalled, reconciling bool
}

func newReconciler[T Object](m *Machine[T], c client.Client, reader client.Reader, rec events.EventRecorder) (*reconciler[T], error) {
	r := &reconciler[T]{
		m: m, b: m.built, client: c, reader: reader, recorder: rec,
		actions: newActions(m.name, m.actionLimit, logf.Log.WithName("kfsm"), m.redact, m.actionWatch),
		echoes:  echo.NewMarks(),
		tracked: map[types.NamespacedName]tracked{},
		strays:  map[types.NamespacedName][]OutputRef{},
		handed:  map[types.NamespacedName]uint64{},
	}
	if c == nil {
		return r, nil // benchmarks of the walk alone
	}
	gvk, err := apiutil.GVKForObject(newObject[T](), c.Scheme())
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", m.name, err)
	}
	r.gvk, r.gk = gvk, gvk.GroupKind()
	if len(m.owns) > 0 {
		if r.owns, err = resolveOwned(m.owns, c.Scheme()); err != nil {
			return nil, fmt.Errorf("machine %s: %w", m.name, err)
		}
	}
	return r, nil
}

// roleOf says whether obj is one of the machine's objects, a child, or
// neither, for the echo filter.
func (r *reconciler[T]) roleOf(obj client.Object) (schema.GroupKind, echo.Role) {
	gvk, err := apiutil.GVKForObject(obj, r.client.Scheme())
	if err != nil {
		return schema.GroupKind{}, echo.Other
	}
	switch gk := gvk.GroupKind(); {
	case gk == r.gk:
		return gk, echo.Parent
	case r.owns[gk] != (ownedType{}):
		return gk, echo.Child
	default:
		return gk, echo.Other
	}
}

// kindOf says of which kind obj is when it is one of the machine's
// objects or a child, for the catch-up filter of a sharded machine.
func (r *reconciler[T]) kindOf(obj client.Object) (schema.GroupKind, bool) {
	gk, role := r.roleOf(obj)
	return gk, role != echo.Other
}

// start is the source that SetupWithManager registers: it gives the
// reconciler and the action pool the controller's queue.
func (r *reconciler[T]) start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	r.mu.Lock()
	r.queue = q
	r.mu.Unlock()
	return r.actions.start(ctx, q)
}

// requeue puts an object on the queue at once, when a change by someone
// else hid behind one of kfsm's writes.
func (r *reconciler[T]) requeue(key types.NamespacedName) {
	r.mu.Lock()
	q := r.queue
	r.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}

// Reconcile reads the object, walks the machine, writes the status once if
// it changed and only then makes the walk visible, and manages the
// finalizer around the walk.
func (r *reconciler[T]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx, span := r.b.tracer.Start(ctx, "kfsm.Reconcile", trace.WithAttributes(
		attribute.String("kfsm.machine", r.m.name),
		attribute.String("k8s.object", req.String()),
	))
	defer span.End()
	var w *walker[T]
	res, err := r.reconcile(ctx, req, &w)
	if w == nil {
		return res, err
	}
	out := reconcileResult{committed: w.committed, err: err}
	switch {
	case !w.committed:
		out.soon = res.RequeueAfter > 0
	case w.out.failure != nil:
		out.after = w.out.failure.RetryAfter
	default:
		out.after, out.soon = w.out.requeueAfter, w.out.soon
	}
	if len(r.m.walkObservers) > 0 {
		r.observed(ctx, req.NamespacedName, w, out)
	}
	if sched := r.m.scheduler(); sched != nil && out.after > 0 && !out.soon && r.managed() {
		// A fake clock times this requeue: it comes when the test moves
		// the clock, not when real time passes. It is due after the walk's
		// time, even if the clock moved since.
		requeue := func() { r.requeue(req.NamespacedName) }
		if left := w.now.Add(out.after).Sub(r.m.clock.Now()); left > 0 {
			sched.AfterFunc(left, requeue)
		} else {
			requeue()
		}
		res.RequeueAfter = 0
	}
	return res, err
}

// reconcileResult is what a walk's reconcile asked for, as observers see it.
type reconcileResult struct {
	committed bool
	after     time.Duration // by the machine's clock
	soon      bool          // at once, to continue
	err       error
}

// managed reports whether the reconciler runs under a manager, whose
// queue it can add to.
func (r *reconciler[T]) managed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queue != nil
}

// reconcile is Reconcile's work; it sets walked to the walk, if one ran.
func (r *reconciler[T]) reconcile(ctx context.Context, req reconcile.Request, walked **walker[T]) (reconcile.Result, error) {

	obj := newObject[T]()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.vanished(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, err
	}
	if r.shards != nil {
		slot, epoch, retry, ok := r.shards.Enter(obj.GetUID())
		if !ok {
			// Another replica's, or this one's when it may write again.
			return reconcile.Result{RequeueAfter: retry}, nil
		}
		defer r.shards.Exit(slot)
		if err := r.handedOver(ctx, obj, epoch); err != nil {
			return reconcile.Result{}, err
		}
	}
	if r.echoes.Stale(echo.Key{GroupKind: r.gk, NamespacedName: req.NamespacedName}, obj) {
		// The cache has not seen kfsm's own last write yet; acting on it
		// would act on the past.
		return reconcile.Result{RequeueAfter: soon}, nil
	}
	if obj.GetAnnotations()[AnnotationPaused] == "true" {
		return r.pause(ctx, obj)
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

	before := obj.DeepCopyObject().(T)
	w := r.walk(ctx, obj, before, deleting)
	*walked = w
	if !sameStatus(before, obj) {
		if err := r.writeStatus(ctx, obj, before); err != nil {
			if quiet(err) {
				return r.writeFailed(ctx, err)
			}
			return r.unwritable(ctx, before, err)
		}
	}
	// Only now is the walk true: what it did becomes visible.
	w.commit()
	w.committed = true
	if w.out.removeFinalizer {
		if err := r.patchFinalizer(ctx, obj, controllerutil.RemoveFinalizer); err != nil {
			return r.writeFailed(ctx, err)
		}
		// The mark of this write stays until the object is seen gone: a
		// cache that lags still holds it with the finalizer, and the
		// deletion path must not run again on that copy.
		r.untrack(req.NamespacedName)
		r.actions.cancel(req.NamespacedName, false)
		return reconcile.Result{}, nil
	}
	committed = true
	r.track(obj)
	return r.result(req, w.out)
}

// result turns a walk's outcome into what controller-runtime expects. A
// failure is returned as an error, so that controller-runtime counts and
// logs it, and the machine's rate limiter requeues the object when the
// backoff says.
func (r *reconciler[T]) result(req reconcile.Request, out outcome) (reconcile.Result, error) {
	f := out.failure
	switch {
	case f == nil:
		return reconcile.Result{RequeueAfter: out.requeueAfter}, nil
	case f.RetryAfter == 0:
		return reconcile.Result{}, reconcile.TerminalError(f)
	}
	if r.limiter != nil {
		after := f.RetryAfter
		if r.m.scheduler() != nil {
			after = clockOnly // Reconcile has the machine's clock time it
		}
		r.limiter.retryIn(req, after)
	}
	return reconcile.Result{}, f
}

// statusOf returns the Status field of a Kubernetes object, the part kfsm
// writes, or the whole object for a type without one. Comparing only the
// status keeps a handler that touches the spec by mistake from costing a
// write on every reconcile.
func statusOf(obj runtime.Object) any {
	if f := statusField(obj); f.IsValid() {
		return f.Interface()
	}
	return obj
}

// sameStatus reports whether a and b hold the same status, as the API
// server would store it. Identical values, what a converged object's walk
// leaves, are recognised quickly; otherwise semantic equality decides, for
// which a time in another location at the same instant is no change.
func sameStatus(a, b runtime.Object) bool {
	x, y := statusPtr(a), statusPtr(b)
	return reflect.DeepEqual(x, y) || equality.Semantic.DeepEqual(x, y)
}

// statusPtr is statusOf without a copy: a pointer to the Status field.
func statusPtr(obj runtime.Object) any {
	if f := statusField(obj); f.IsValid() && f.CanAddr() {
		return f.Addr().Interface()
	}
	return obj
}

func statusField(obj runtime.Object) reflect.Value {
	v := reflect.ValueOf(obj)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		return v.Elem().FieldByName("Status")
	}
	return reflect.Value{}
}

// quiet reports whether a failed write is the normal life of a controller:
// someone else changed the object meanwhile, or it is gone. Such writes
// are retried soon, without an error.
func quiet(err error) bool { return apierrors.IsConflict(err) || apierrors.IsNotFound(err) }

// writeFailed turns a failed write into a result.
func (r *reconciler[T]) writeFailed(ctx context.Context, err error) (reconcile.Result, error) {
	if quiet(err) {
		logf.FromContext(ctx).V(1).Info("write raced with another change; retrying", "machine", r.m.name, "error", err.Error())
		return reconcile.Result{RequeueAfter: soon}, nil
	}
	return reconcile.Result{}, r.redactedError(err)
}

// write runs one of kfsm's writes of obj, so that its watch event is known
// for an echo.
func (r *reconciler[T]) write(obj T, do func() error) error {
	key := echo.KeyOf(r.gk, obj)
	r.echoes.Begin(key)
	err := do()
	var wrote client.Object
	if err == nil {
		wrote = obj
	}
	if r.echoes.Wrote(key, wrote) {
		r.requeue(key.NamespacedName)
	}
	return err
}

// echoed hands the echo of one of kfsm's writes of an object, which the
// echo filter drops, to the machine's Watches of its own kind: the write
// is no news for the object written, but it is for the other objects a
// watch maps it to (a moose's friends). The cache has the written version
// by then. Echoes of children are not handed on, so that a watch mapping
// a child to its parent cannot make kfsm's applies drive the loop.
func (r *reconciler[T]) echoed(gk schema.GroupKind, obj client.Object) {
	if gk != r.gk {
		return
	}
	for _, w := range r.m.watches {
		if wgvk, err := apiutil.GVKForObject(w.obj, r.client.Scheme()); err != nil || wgvk.GroupKind() != gk {
			continue
		}
		for _, req := range w.fn(context.Background(), obj) {
			if req.NamespacedName != client.ObjectKeyFromObject(obj) {
				r.requeue(req.NamespacedName)
			}
		}
	}
}

// writeStatus writes what the walk changed in the status since before, as
// a merge patch: only kfsm writes the status, so a change that someone
// else made to the object meanwhile (a label, the spec) does not make the
// walk's record a conflict, to be thrown away with the work it recorded.
func (r *reconciler[T]) writeStatus(ctx context.Context, obj, before T) error {
	patch, err := statusPatch(before, obj)
	if err != nil {
		return err
	}
	return r.write(obj, func() error {
		return r.client.Status().Patch(ctx, obj, patch, client.FieldOwner(r.m.FieldOwner()))
	})
}

// statusPatch is the merge patch from before's status to obj's. It is
// computed from the statuses alone, which is all the status subresource
// takes: encoding and comparing the whole objects, managed fields and
// all, cost several times as much.
func statusPatch(before, obj runtime.Object) (client.Patch, error) {
	if !statusField(obj).IsValid() {
		return client.MergeFrom(before.(client.Object)), nil
	}
	from, err := json.Marshal(map[string]any{"status": statusOf(before)})
	if err != nil {
		return nil, fmt.Errorf("encoding the status: %w", err)
	}
	to, err := json.Marshal(map[string]any{"status": statusOf(obj)})
	if err != nil {
		return nil, fmt.Errorf("encoding the status: %w", err)
	}
	data, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		return nil, fmt.Errorf("encoding the status: %w", err)
	}
	return client.RawPatch(types.MergePatchType, data), nil
}

func (r *reconciler[T]) patchFinalizer(ctx context.Context, obj T, change func(client.Object, string) bool) error {
	base := obj.DeepCopyObject().(T)
	change(obj, r.m.Finalizer())
	return r.write(obj, func() error {
		return r.client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), client.FieldOwner(r.m.FieldOwner()))
	})
}

// unwritable reports a status that the API server refuses, for example
// one over its size limit: the walk is not recorded, so nothing of it is
// made visible, and a smaller write tries to get the news through.
func (r *reconciler[T]) unwritable(ctx context.Context, before T, err error) (reconcile.Result, error) {
	msg := r.errorText(err)
	r.b.metrics.statusWriteErrors.Inc()
	r.event(before, nil, corev1.EventTypeWarning, ReasonStatusWriteFailed, "WriteStatus",
		"the status could not be written, so the last walk was not recorded: "+msg)
	small := before.DeepCopyObject().(T)
	st, gen := small.FSMStatus(), small.GetGeneration()
	message := "the status could not be written: " + msg
	for _, c := range []metav1.Condition{
		{Type: ConditionReady, Status: metav1.ConditionFalse},
		{Type: ConditionStalled, Status: metav1.ConditionTrue},
	} {
		c.Reason, c.Message, c.ObservedGeneration = ReasonStatusWriteFailed, message, gen
		meta.SetStatusCondition(&st.Conditions, c)
	}
	if !sameStatus(before, small) {
		if werr := r.writeStatus(ctx, small, before); werr != nil {
			logf.FromContext(ctx).V(1).Info("the smaller status could not be written either", "error", r.errorText(werr))
		}
	}
	return reconcile.Result{}, fmt.Errorf("writing the status of %s: %s", client.ObjectKeyFromObject(before), msg)
}

// pause reports a paused object in its status, and does nothing else.
func (r *reconciler[T]) pause(ctx context.Context, obj T) (reconcile.Result, error) {
	st := obj.FSMStatus()
	if c := meta.FindStatusCondition(st.Conditions, ConditionPaused); c != nil && c.Status == metav1.ConditionTrue {
		return reconcile.Result{}, nil
	}
	before := obj.DeepCopyObject().(T)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: ConditionPaused, Status: metav1.ConditionTrue, Reason: ReasonPaused, ObservedGeneration: obj.GetGeneration(),
		Message: fmt.Sprintf("annotation %s is \"true\": no handler runs until it is removed", AnnotationPaused),
	})
	if err := r.writeStatus(ctx, obj, before); err != nil {
		return r.writeFailed(ctx, err)
	}
	r.event(obj, nil, corev1.EventTypeNormal, ReasonPaused, "Pause", "paused: no handler runs until annotation "+AnnotationPaused+" is removed")
	return reconcile.Result{}, nil
}

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
func (r *reconciler[T]) walk(ctx context.Context, obj, before T, deleting bool) *walker[T] {
	w := &walker[T]{r: r, ctx: ctx, obj: obj, before: before, st: obj.FSMStatus(), now: r.m.clock.Now(), log: logf.FromContext(ctx), deleting: deleting}
	w.notices = w.noticeBuf[:0]
	w.out = w.walk()
	w.st.ObservedGeneration = obj.GetGeneration()
	return w
}

func (w *walker[T]) walk() outcome {
	st, gen := w.st, w.obj.GetGeneration()
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
	if meta.FindStatusCondition(st.Conditions, ConditionPaused) != nil {
		meta.RemoveStatusCondition(&st.Conditions, ConditionPaused)
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
	if def == nil {
		return 0, false
	}
	if w.timedOut(def) {
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
	visited stateSet
	passed  stateSet   // pipeline: states whose handler moved on
	req     Request[T] // one per walk, filled anew for each handler
	out     outcome

	deleting  bool          // the object is being deleted: the deletion path runs
	retrying  bool          // AnnotationRetry asked for a run now
	goal      State         // the goal function's answer, if any
	applied   []OutputRef   // children applied in this run (lifecycle) or pass (pipeline)
	outputErr error         // the first failed Apply or Delete of this run
	calls     int           // handlers run so far
	snapshot  reflect.Value // the status before the running handler, after the first

	committed bool            // the status write went through
	steps     []Step          // for OnWalk observers
	edges     []graph.EdgeKey // for OnWalk observers

	notices   []notice // made visible once the status is written
	noticeBuf [2]notice
	logs      []func()
}

// notice is a transition or an event that a walk makes visible once the
// status that records it is written, so that a write that fails reports
// nothing that did not happen.
type notice struct {
	moved bool
	t     Transition
	spent time.Duration // in the state left, or -1 when unknown

	eventtype, reason, action, note string
	related                         runtime.Object
}

// notify keeps an event for commit.
func (w *walker[T]) notify(eventtype, reason, action, note string, related runtime.Object) {
	w.notices = append(w.notices, notice{eventtype: eventtype, reason: reason, action: action, note: note, related: related})
}

// later keeps a log line for commit.
func (w *walker[T]) later(f func()) { w.logs = append(w.logs, f) }

// commit makes the walk visible, once its status is written: each
// transition is counted, logged, recorded as an event and told to the
// observers, once.
func (w *walker[T]) commit() {
	r := w.r
	for _, f := range w.logs {
		f()
	}
	for i := range w.notices {
		n := &w.notices[i]
		if !n.moved {
			r.event(w.obj, n.related, n.eventtype, n.reason, n.action, n.note)
			continue
		}
		t := n.t
		r.b.metrics.transition(t.From, t.To, t.Reason)
		if n.spent >= 0 {
			r.b.metrics.left(t.From, n.spent.Seconds())
		}
		if w.log.Enabled() {
			w.log.Info("transition", "machine", r.m.name, "object", client.ObjectKeyFromObject(w.obj).String(), "from", t.From, "to", t.To, "reason", t.Reason)
		}
		eventtype := corev1.EventTypeNormal
		if t.Reason == ReasonTimeout || t.Reason == ReasonRetriesExhausted {
			eventtype = corev1.EventTypeWarning
		}
		// The events library folds events of one object that share a
		// reason and an action into a series; the target state as the
		// action keeps distinct transitions apart.
		r.event(w.obj, nil, eventtype, t.Reason, string(t.To), r.b.note(t))
		if len(r.m.observers) > 0 {
			// A typed object that the client decoded has no kind.
			w.obj.GetObjectKind().SetGroupVersionKind(r.gvk)
		}
		for _, observe := range r.m.observers {
			observe(w.ctx, w.obj, t)
		}
	}
}

// start returns the state the walk begins in, or "" when nothing may run.
func (w *walker[T]) start() State {
	b := w.r.b
	switch {
	case w.deleting:
		if w.r.m.mode == Lifecycle && b.deletion[w.st.State] {
			return w.st.State
		}
		w.took("", b.onDelete, graph.DeleteEntry)
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
	for {
		def := b.states[cur]
		w.visited.add(def.index)

		if w.timedOut(def) {
			next := State(def.timeout.To)
			if done, out := w.moveOn(cur, next, ReasonTimeout); done {
				return out
			}
			cur = next
			continue
		}

		attempt := int(w.st.Failures) + 1
		res := w.call(def)
		if res.kind == resultDone {
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
			if done, out := w.moveOn(cur, next, ReasonNext); done {
				return out
			}
			cur = next
			continue

		case resultWait:
			reason := reasonOr(res.reason, "Waiting")
			w.rest(cur, reason)
			// The failures of the state still count: a Wait is no success,
			// and a handler that waits between failed attempts (for an
			// action it started again) must exhaust its retries all the same.
			w.st.RetryAt = nil
			w.settle(cur, metav1.ConditionFalse, reason, def.waiting, true, nil)
			return outcome{requeueAfter: w.withTimeout(def, res.after)}

		case resultDone:
			w.rest(cur, ReasonDone)
			w.st.Failures, w.st.RetryAt = 0, nil
			w.settle(cur, metav1.ConditionTrue, ReasonDone, def.done, false, nil)
			if w.deleting && def.final {
				return outcome{removeFinalizer: true}
			}
			return outcome{requeueAfter: w.withTimeout(def, w.r.m.resyncAfter())}

		case resultStop:
			reason := reasonOr(res.reason, "Stopped")
			w.rest(cur, reason)
			w.stall(cur, reason, w.r.redact(res.message))
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

// edgeKinds names the kind of edge that each reason of moveOn takes.
var edgeKinds = map[string]string{
	ReasonNext:             graph.Exit.String(),
	ReasonTimeout:          graph.TimeoutExit.String(),
	ReasonRetriesExhausted: graph.RetriesExit.String(),
}

// moveOn records the move from cur to next. It says to stop when next was
// already run in this reconcile, so that a state runs at most once per
// reconcile; the next reconcile, soon, continues there.
func (w *walker[T]) moveOn(cur, next State, reason string) (bool, outcome) {
	w.took(cur, next, edgeKinds[reason])
	if w.r.m.mode == Lifecycle {
		w.move(next, reason)
	}
	if w.visited.has(w.r.b.states[next].index) {
		w.rest(cur, reason)
		w.settle(next, metav1.ConditionFalse, ReasonProgressing, fmt.Sprintf("moved on to state %s", next), true, nil)
		return true, outcome{requeueAfter: soon, soon: true}
	}
	return false, outcome{}
}

// failed handles a failed attempt: it either stops the walk (retry after
// the backoff, or stalled) or names the state the retries edge leads to.
func (w *walker[T]) failed(cur State, def *stateDef[T], err error) (bool, outcome, State) {
	reason := failureReason(err)
	msg := w.r.errorText(err)
	w.rest(cur, reason) // first: a pipeline resting somewhere new starts counting afresh
	w.st.Failures++
	w.r.b.metrics.handlerError(cur)
	w.notify(corev1.EventTypeWarning, reason, string(cur), fmt.Sprintf("state %s failed (attempt %d): %s", cur, w.st.Failures, msg), related(err))
	f := &HandlerError{State: cur, Attempt: int(w.st.Failures), Err: w.r.redactedError(err)}

	if def.retries != nil && int(w.st.Failures) >= def.retries.Limit {
		w.st.RetryAt = nil
		if def.retries.To != "" {
			next := State(def.retries.To)
			if done, out := w.moveOn(cur, next, ReasonRetriesExhausted); done {
				return true, out, ""
			}
			return false, outcome{}, next
		}
		w.stall(cur, ReasonRetriesExhausted, fmt.Sprintf("state %s failed %d times: %s", cur, w.st.Failures, msg))
		return true, outcome{failure: f}, ""
	}
	after := backoff(w.st.Failures)
	w.st.RetryAt = &metav1.MicroTime{Time: w.now.Add(after)}
	w.settle(cur, metav1.ConditionFalse, reason, fmt.Sprintf("state %s failed: %s", cur, msg), true, nil)
	f.RetryAfter = w.withTimeout(def, after)
	return true, outcome{failure: f}, ""
}

// failureReason names a failure for conditions and events: child
// problems get reasons of their own, so that they are found by reason.
func failureReason(err error) string {
	var conflict *ConflictError
	var undeclared *UndeclaredOutputError
	var exists *AlreadyExistsError
	var limit *OutputLimitError
	switch {
	case errors.As(err, &conflict):
		return ReasonApplyConflict
	case errors.As(err, &undeclared):
		return ReasonUndeclaredOutput
	case errors.As(err, &exists):
		return ReasonAlreadyExists
	case errors.As(err, &limit):
		return ReasonOutputLimit
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
	// What the handler changes is discarded if it asks for an undeclared
	// transition; before the first handler, the status is as it was read.
	if w.calls > 0 {
		w.snapshot = w.authorsStatus(w.obj)
	}
	w.calls++
	ctx, span := w.r.b.tracer.Start(w.ctx, def.spanName)
	defer span.End()
	log := w.log
	if log.Enabled() {
		log = log.WithValues("machine", w.r.m.name, "state", def.name)
	}
	req := &w.req
	*req = Request[T]{
		Object:     w.obj,
		Client:     w.r.client,
		Log:        log,
		Clock:      w.r.m.clock,
		State:      def.name,
		From:       w.from(),
		Attempt:    int(w.st.Failures) + 1,
		RetryAsked: w.retrying,
		Goal:       w.goal,
		w:          w,
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
	started := time.Now() // real time: a slow handler holds a worker in real time
	defer func() {
		w.r.slow(w.log, def.name, time.Since(started))
		if p := recover(); p != nil {
			why := w.r.redact(fmt.Sprint(p))
			w.log.Error(errors.New(why), "handler panicked", "machine", w.r.m.name, "state", def.name, "stack", string(debug.Stack()))
			res = Fail(fmt.Errorf("handler panicked: %s", why))
		}
		if w.outputErr != nil && res.kind != resultFail {
			res = Fail(w.outputErr)
		}
		if res.kind == resultFail {
			span.SetStatus(codes.Error, w.r.errorText(res.err))
		}
	}()
	return def.handler(ctx, req)
}

// slow logs, once per state, a handler that ran for longer than the
// machine's SlowHandlerAfter.
func (r *reconciler[T]) slow(log logr.Logger, state State, ran time.Duration) {
	if r.m.slowAfter <= 0 || ran < r.m.slowAfter {
		return
	}
	if _, logged := r.slowLogged.LoadOrStore(state, true); logged {
		return
	}
	log.Info("a handler ran long, holding a reconcile worker: other objects waited meanwhile. Long work belongs in Request.Action, which runs outside the worker",
		"machine", r.m.name, "state", state, "ran", ran.Round(time.Millisecond).String(), "slowAfter", r.m.slowAfter.String())
}

// authorsStatus copies obj's status without kfsm's part, which kfsm
// keeps for itself: what a discard must restore.
func (w *walker[T]) authorsStatus(obj T) reflect.Value {
	f := statusField(obj)
	if !f.IsValid() {
		return reflect.Value{}
	}
	st := obj.FSMStatus()
	own := *st
	*st = Status{}
	defer func() { *st = own }()
	if copier := w.r.b.copyStatus; copier.IsValid() {
		return copier.Call([]reflect.Value{f.Addr()})[0].Elem()
	}
	return reflect.ValueOf(statusOf(obj.DeepCopyObject()))
}

// discard undoes what the running handler changed in the status: its
// transition was refused, and so is its work. kfsm's own record stays.
func (w *walker[T]) discard() {
	f := statusField(w.obj)
	if !f.IsValid() {
		return
	}
	snap := w.snapshot
	if w.calls <= 1 {
		snap = w.authorsStatus(w.before)
	}
	own := *w.st
	f.Set(snap)
	w.st = w.obj.FSMStatus()
	*w.st = own
}

// from is the state the last transition came from.
func (w *walker[T]) from() State {
	if n := len(w.st.History); n > 0 {
		return w.st.History[n-1].From
	}
	return ""
}

// move makes next the persisted state (lifecycle, or a pipeline's resting
// state) and keeps the transition to make it visible at commit.
func (w *walker[T]) move(next State, reason string) {
	from := w.st.State
	if from == next {
		return
	}
	spent := time.Duration(-1)
	if from != "" && w.st.StateSince != nil {
		spent = w.now.Sub(w.st.StateSince.Time)
	}
	since := metav1.NewTime(w.now)
	if w.st.StateSince == nil {
		w.st.StateSince = &metav1.Time{}
	}
	*w.st.StateSince = since
	w.st.State, w.st.Failures, w.st.RetryAt = next, 0, nil
	t := Transition{From: from, To: next, Reason: reason, Time: since}
	w.st.History = append(w.st.History, t)
	// The latest transition stays whatever the limit: Request.From reads it.
	if over := len(w.st.History) - max(w.r.m.historyLimit, 1); over > 0 {
		w.st.History = slices.Delete(w.st.History, 0, over)
	}
	w.notices = append(w.notices, notice{moved: true, t: t, spent: spent})
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
		w.later(func() {
			w.log.Info("stalled", "machine", w.r.m.name, "state", cur, "reason", reason, "message", message)
		})
		w.notify(corev1.EventTypeWarning, reason, string(cur), fmt.Sprintf("stalled in state %s: %s", cur, message), nil)
	}
	w.st.RetryAt = nil
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
	events := append([]State{res.next}, res.also...)
	bad := events[slices.IndexFunc(events, func(e State) bool { return def.exitIndex(e) < 0 })]
	_, declared := w.r.b.states[bad]
	undeclared := !declared && bad != Default
	msg := refusal.Why(refusal.Past, cur, events, bad, def.exits, undeclared, typo.Closest(bad, w.r.m.stateNames())) + "; the transition was refused"
	if !w.isStalled(ReasonIllegalTransition, msg) {
		w.later(func() {
			w.log.Error(errors.New(msg), "illegal transition", "machine", w.r.m.name, "from", cur, "to", res.next)
		})
	}
	w.rest(cur, ReasonIllegalTransition)
	w.stall(cur, ReasonIllegalTransition, msg)
}

// unreachableGoal reports a goal that the object cannot walk to. No
// handler runs: it would be told to walk where no path leads.
func (w *walker[T]) unreachableGoal(cur State, err error) {
	msg := err.Error()
	if !w.isStalled(ReasonGoalUnreachable, msg) {
		w.later(func() { w.log.Error(err, "unreachable goal", "machine", w.r.m.name, "state", cur, "goal", w.goal) })
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
		w.later(func() { w.log.Error(errors.New(msg), "unknown state", "machine", w.r.m.name, "state", w.st.State) })
	}
	w.stall(w.st.State, ReasonUnknownState, msg)
}

// track keeps the objects and stalled gauges in step with obj's status,
// and remembers the children that garbage collection cannot reach, for
// an object that vanishes before its deletion path is done.
func (r *reconciler[T]) track(obj T) {
	key := client.ObjectKeyFromObject(obj)
	st := obj.FSMStatus()
	now := tracked{
		uid:         obj.GetUID(),
		state:       st.State,
		stalled:     meta.IsStatusConditionTrue(st.Conditions, ConditionStalled),
		reconciling: meta.IsStatusConditionTrue(st.Conditions, ConditionReconciling),
	}
	strays := unreachable(obj, st.Outputs)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case len(strays) > 0:
		r.strays[key] = strays
	case len(r.strays) > 0:
		delete(r.strays, key)
	}
	was, known := r.tracked[key]
	if known && was == now {
		return
	}
	r.tracked[key] = now
	if known {
		r.b.metrics.count(was, -1)
	}
	r.b.metrics.count(now, 1)
}

// forget drops what the reconciler knows of an object, and returns the
// children that garbage collection cannot reach.
func (r *reconciler[T]) forget(key types.NamespacedName) []OutputRef {
	r.echoes.Forget(echo.Key{GroupKind: r.gk, NamespacedName: key})
	return r.untrack(key)
}

// untrack drops what the gauges and the orphan cleanup keep of an object,
// and returns its strays.
func (r *reconciler[T]) untrack(key types.NamespacedName) []OutputRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	strays := r.strays[key]
	delete(r.strays, key)
	delete(r.handed, key)
	was, known := r.tracked[key]
	if !known {
		return strays
	}
	delete(r.tracked, key)
	r.b.metrics.count(was, -1)
	return strays
}

// conditionReason is the pattern metav1.Condition requires of a reason.
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// reasonOr returns reason if the API server accepts it as a condition
// reason, else a CamelCase version of it, else fallback.
func reasonOr(reason, fallback string) string {
	if conditionReason.MatchString(reason) && len(reason) <= maxReason {
		return reason
	}
	var b strings.Builder
	for _, word := range strings.FieldsFunc(reason, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		b.WriteString(strings.ToUpper(word[:1]) + word[1:])
	}
	if s := b.String(); conditionReason.MatchString(s) && len(s) <= maxReason {
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

// retryMark is what Status.LastHandledRetry keeps of a value of
// AnnotationRetry: the value, or its digest if the field cannot hold it.
func retryMark(asked string) string {
	if len(asked) <= maxRetryMark {
		return asked
	}
	sum := sha256.Sum256([]byte(asked))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// truncate makes s a condition message: one line, and bounded.
func truncate(s string) string { return clip(oneLine(s), maxMessage) }

// clip shortens s to at most n bytes, cut at a character and marked with
// an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
