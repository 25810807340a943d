package fsm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/action"
	"github.com/kfsm/kfsm/fsm/internal/childindex"
	"github.com/kfsm/kfsm/fsm/internal/echo"
	"github.com/kfsm/kfsm/fsm/internal/shard"
	"github.com/kfsm/kfsm/fsm/internal/wire"
)

// clockOnly is the rate limiter's delay for a retry that a fake clock
// times: real time never does.
const clockOnly = 24 * time.Hour

// reconciler runs a built machine for controller-runtime.
type reconciler[T Object] struct {
	m      *Machine[T]
	b      *built[T]
	client client.Client
	reader client.Reader // the API server itself, for what the cache may miss
	// watched are the namespaces whose objects of T the manager's cache
	// watches, when it says (see leancache.Scoped); nil for all of them.
	watched  []string
	recorder events.EventRecorder
	gvk      schema.GroupVersionKind // of T
	gk       schema.GroupKind
	owns     map[schema.GroupKind]ownedType
	// index finds children by parent UID under a manager, for the types
	// that it indexes.
	index   *childindex.Index
	scopes  sync.Map  // schema.GroupVersionKind → namespaced, of owned types
	walkers sync.Pool // of *walker[T]: a walk allocates none
	actions *action.Pool
	echoes  *echo.Marks
	limiter *requeueLimiter // set under a manager
	shards  *shard.Replica  // set when the machine is sharded
	// slowLogged holds the states whose handler was logged as slow.
	slowLogged sync.Map
	// fatCache is set once the cache was seen to keep managed fields.
	fatCache atomic.Bool

	mu      sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	tracked map[types.NamespacedName]tracked
	strays  map[types.NamespacedName][]OutputRef // children that garbage collection cannot reach
	// checked is, for a sharded machine, the epoch of each slot when this
	// replica last checked its cache against the API server (see Gained),
	// and parked the objects that came before the check.
	checked [shard.NumSlots]uint64
	parked  map[types.NamespacedName]struct{}
	// checks counts the checks done, and queued holds what is known of
	// the objects that a check queued (see handedOver).
	checks   uint64
	queued   map[types.NamespacedName]checkQueued
	caughtUp chan struct{} // closed once catchUp has run
	// newerTold is, of each object a newer graph version wrote, the
	// generation this process said it leaves alone.
	newerTold map[types.NamespacedName]int64
}

func newReconciler[T Object](m *Machine[T], c client.Client, reader client.Reader, rec events.EventRecorder) (*reconciler[T], error) {
	r := &reconciler[T]{
		m: m, b: m.built, client: c, reader: reader, recorder: rec,
		actions:   action.New(m.name, m.actionLimit, logf.Log.WithName("kfsm"), m.redact, m.clock, actionChanged(m.actionWatch)),
		tracked:   map[types.NamespacedName]tracked{},
		strays:    map[types.NamespacedName][]OutputRef{},
		newerTold: map[types.NamespacedName]int64{},
		parked:    map[types.NamespacedName]struct{}{},
		queued:    map[types.NamespacedName]checkQueued{},
		caughtUp:  make(chan struct{}),
	}
	close(r.caughtUp) // until SetupWithManager says otherwise
	r.walkers.New = func() any { return new(walker[T]) }
	if c == nil {
		r.echoes = echo.NewMarks(schema.GroupKind{})
		return r, nil // benchmarks of the walk alone
	}
	gvk, err := apiutil.GVKForObject(newObject[T](), c.Scheme())
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", m.name, err)
	}
	r.gvk, r.gk = gvk, gvk.GroupKind()
	r.echoes = echo.NewMarks(r.gk)
	if r.owns, err = resolveOwned(m.owns, c.Scheme()); err != nil {
		return nil, fmt.Errorf("machine %s: %w", m.name, err)
	}
	return r, nil
}

// Reconcile reads the object, walks the machine, writes the status once if
// it changed and only then makes the walk visible, and manages the
// finalizer around the walk.
func (r *reconciler[T]) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	span := trace.Span(noop.Span{}) // none starts where none would record: see call
	if _, off := r.b.tracer.(noop.Tracer); !off || trace.SpanFromContext(ctx).IsRecording() {
		ctx, span = r.reconcileSpan(ctx, req.NamespacedName)
	}
	defer span.End()
	var run walkRun[T]
	res, err := r.reconcile(ctx, req, &run)
	w := run.w
	if w == nil {
		return res, err
	}
	defer w.release()
	r.noteFatCache(ctx, w.before)
	out := reconcileResult{committed: w.committed, err: err, began: run.began, ended: run.ended}
	switch {
	case !w.committed, w.out.removeFinalizer: // a write raced if it asks again
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

	began, ended time.Time // when the reconcile held the object
}

// walkRun is what a reconcile tells Reconcile of its walk: the walker, if
// one ran, and, for the Walk observers, when the reconcile held the
// object.
type walkRun[T Object] struct {
	w            *walker[T]
	began, ended time.Time
}

// reconcile is Reconcile's work; it fills run in.
func (r *reconciler[T]) reconcile(ctx context.Context, req reconcile.Request, run *walkRun[T]) (reconcile.Result, error) {
	begun := r.begin(req.NamespacedName)
	obj := newObject[T]()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.vanished(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, err
	}
	r.echoes.Read(echo.KeyOf(r.gk, obj), obj)
	if r.shards != nil {
		slot, epoch, retry, ok := r.shards.Enter(obj.GetUID())
		if !ok {
			// Another replica's, or this one's when it may write again.
			return reconcile.Result{RequeueAfter: retry}, nil
		}
		defer r.shards.Exit(slot)
		if !r.handedOver(req.NamespacedName, slot, epoch, begun) {
			return reconcile.Result{}, nil
		}
	}
	defer r.hold(ctx, obj, run)() // after Exit, so that it runs before
	if leave, after := r.notOurs(ctx, obj); leave {
		return reconcile.Result{RequeueAfter: after}, nil
	}
	if obj.GetAnnotations()[AnnotationPaused] == "true" {
		return r.pause(ctx, obj)
	}

	deleting := !obj.GetDeletionTimestamp().IsZero()
	if deleting {
		r.actions.Cancel(req.NamespacedName, true)
	}
	hasFinalizer := controllerutil.ContainsFinalizer(obj, r.m.Finalizer())
	if deleting && !hasFinalizer {
		// Not ours to clean up: no deletion path, or it already ran.
		r.forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	// What the walk records of actions holds only if its writes go
	// through; runs it prepared start only then.
	committed := false
	defer func() { r.actions.Settle(req.NamespacedName, committed) }()
	if !deleting && r.b.onDelete != "" && !hasFinalizer {
		// Before any handler: whatever a handler creates, the deletion
		// path gets the chance to clean up.
		if err := r.patchFinalizer(ctx, obj, controllerutil.AddFinalizer); err != nil {
			return r.writeFailed(ctx, err)
		}
	}

	before := obj.DeepCopyObject().(T)
	w := r.walk(ctx, obj, before, deleting)
	run.w = w
	if !wire.Same(before, obj) {
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
		r.actions.Cancel(req.NamespacedName, false)
		return reconcile.Result{}, nil
	}
	committed = true
	r.track(obj)
	return r.result(req, w.out)
}

// hold links the reconcile's span to the object's last transition and
// notes, for the Walk observers, when the reconcile began to hold the
// object; the function it returns notes when it stopped. Deferred after a
// sharded replica's Exit, that runs before it: the span lies within the
// time that the replica held the object's slot.
func (r *reconciler[T]) hold(ctx context.Context, obj T, run *walkRun[T]) func() {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		linkLastTransition(span, obj.FSMStatus())
	}
	if len(r.m.walkObservers) == 0 {
		return func() {}
	}
	run.began = time.Now()
	return func() { run.ended = time.Now() }
}

// notOurs reports whether to leave obj, and when to look again: soon on a
// cache without kfsm's last write, or behind what a new leader's catch-up
// found (acting on it would act on the past), never when a newer version
// of the graph wrote it.
func (r *reconciler[T]) notOurs(ctx context.Context, obj T) (bool, time.Duration) {
	// A new leader's reconciles wait for its catch-up to know how far the
	// cache lags: one requeued meanwhile would come back, and every object
	// of the cache's first list would be reconciled twice.
	select {
	case <-r.caughtUp:
	case <-ctx.Done():
		return true, soon
	}
	if r.echoes.Stale(echo.KeyOf(r.gk, obj), obj) {
		return true, soon
	}
	return r.newer(ctx, obj), 0
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
		r.limiter.RetryIn(req, after)
	}
	return reconcile.Result{}, f
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
		LastTransitionTime: metav1.NewTime(r.m.clock.Now()),
		Message:            fmt.Sprintf("annotation %s is \"true\": no handler runs until it is removed", AnnotationPaused),
	})
	if err := r.writeStatus(ctx, obj, before); err != nil {
		return r.writeFailed(ctx, err)
	}
	r.event(obj, nil, corev1.EventTypeNormal, ReasonPaused, "Pause", "paused: no handler runs until annotation "+AnnotationPaused+" is removed")
	return reconcile.Result{}, nil
}
