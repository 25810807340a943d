package fsm

import (
	"cmp"
	"context"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/echo"
)

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

// echoed hands the echo of one of kfsm's writes of an object, which the
// echo filter drops, to the machine's Watches of its own kind: the write
// is no news for the object written, but it is for the other objects a
// watch maps it to (a moose's friends). The cache has the written version
// by then. Echoes of children are not handed on, so that a watch mapping
// a child to its parent cannot make kfsm's applies drive the loop. The
// catch-up filter of a sharded machine hands on what it drops too: an
// object of a slot the replica takes is queued when the slot is, but
// its friends would not hear that it changed.
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

// parentOf maps a child that carries no owner reference back to its
// parent through the labels and annotation that Apply put on it. Children
// with a controller reference are left to the Owns watch. A child whose
// parent this manager cannot see, or whose parent is another object of
// the same name, is not this machine's business.
func (r *reconciler[T]) parentOf(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetLabels()[LabelMachine] != r.m.name || metav1.GetControllerOf(o) != nil {
		return nil
	}
	owner := o.GetAnnotations()[AnnotationOwner]
	if owner == "" {
		return nil
	}
	ns, name, found := strings.Cut(owner, "/")
	if !found {
		ns, name = "", owner
	}
	key := client.ObjectKey{Namespace: ns, Name: name}
	parent := newObject[T]()
	if err := r.client.Get(ctx, key, parent, client.UnsafeDisableDeepCopy); err != nil || string(parent.GetUID()) != o.GetLabels()[LabelOwnerUID] {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// start is the source that SetupWithManager registers: it gives the
// reconciler and the action pool the controller's queue.
func (r *reconciler[T]) start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	r.mu.Lock()
	r.queue = q
	r.mu.Unlock()
	return r.actions.Start(ctx, q)
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

// countingQueue is the controller queue of a sharded machine: it tells the
// reconciler of each add (see added).
type countingQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	added func(types.NamespacedName)
}

func (q *countingQueue) Add(req reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{}, req)
}

func (q *countingQueue) AddAfter(req reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, req)
}

func (q *countingQueue) AddRateLimited(req reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, req)
}

func (q *countingQueue) AddWithOpts(o priorityqueue.AddOpts, reqs ...reconcile.Request) {
	for _, req := range reqs {
		q.added(req.NamespacedName)
	}
	q.PriorityQueue.AddWithOpts(o, reqs...)
}

// countAdds has the controller's queue tell r of each add (see
// countingQueue), if it is a priority queue: the one of opts.NewQueue, or
// controller-runtime's default.
func (r *reconciler[T]) countAdds(mgr manager.Manager, opts *controller.Options) {
	newQueue := opts.NewQueue
	if newQueue == nil {
		if !ptr.Deref(cmp.Or(opts.UsePriorityQueue, mgr.GetControllerOptions().UsePriorityQueue), true) {
			return
		}
		newQueue = func(name string, limiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			return priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = limiter })
		}
	}
	opts.NewQueue = func(name string, limiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		q := newQueue(name, limiter)
		if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
			return &countingQueue{PriorityQueue: pq, added: r.added}
		}
		return q
	}
}

// managed reports whether the reconciler runs under a manager, whose
// queue it can add to.
func (r *reconciler[T]) managed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queue != nil
}

// scheduler is the machine's clock when it is not the real one and can
// run functions: under a manager, the requeues that wait on time then
// wait on it, so that a test that moves a fake clock moves them too.
func (m *Machine[T]) scheduler() clock.WithDelayedExecution {
	switch c := m.clock.(type) {
	case clock.RealClock, *clock.RealClock: // none: controller-runtime times the requeues
	case clock.WithDelayedExecution:
		return c
	}
	return nil
}

// Failed attempts back off exponentially between these bounds.
const (
	backoffBase = time.Second
	backoffMost = 5 * time.Minute
)

// backoffAfter is how long an object waits after its failures-th failed attempt
// in a row: 1 s, doubling up to 5 min.
func backoffAfter(failures int32) time.Duration {
	// 30 doublings are past the bound, and short of overflowing.
	return min(backoffBase<<min(max(failures-1, 0), 30), backoffMost)
}

// rateLimiter is the rate limiter that times the requeues other than
// kfsm's backoff: the one that WithOptions gives, or controller-runtime's
// own default, which depends on the queue.
func rateLimiter(mgr manager.Manager, opts controller.Options) workqueue.TypedRateLimiter[reconcile.Request] {
	if opts.RateLimiter != nil {
		return opts.RateLimiter
	}
	if ptr.Deref(cmp.Or(opts.UsePriorityQueue, mgr.GetControllerOptions().UsePriorityQueue), true) {
		return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 1000*time.Second)
	}
	return workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]()
}

// requeueLimiter is the rate limiter of a machine's controller. An object whose
// handler failed is requeued when kfsm's backoff says; every other
// requeue is the controller's own rate limiter's to time.
type requeueLimiter struct {
	workqueue.TypedRateLimiter[reconcile.Request]

	mu  sync.Mutex
	due map[reconcile.Request]time.Duration
}

// RetryIn sets the delay of the next rate-limited requeue of req.
func (l *requeueLimiter) RetryIn(req reconcile.Request, after time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.due[req] = after
}

// When is the delay of req's next rate-limited requeue.
func (l *requeueLimiter) When(req reconcile.Request) time.Duration {
	l.mu.Lock()
	after, ok := l.due[req]
	delete(l.due, req)
	l.mu.Unlock()
	if ok {
		return after
	}
	return l.TypedRateLimiter.When(req)
}
