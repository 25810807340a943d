package fsm

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

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
	d := backoffBase
	for i := int32(1); i < failures && d < backoffMost; i++ {
		d *= 2
	}
	return min(d, backoffMost)
}

// requeueLimiter is the rate limiter of a machine's controller. An object whose
// handler failed is requeued when kfsm's backoff says; every other
// requeue is the controller's own rate limiter's to time.
type requeueLimiter struct {
	workqueue.TypedRateLimiter[reconcile.Request]

	mu  sync.Mutex
	due map[reconcile.Request]time.Duration
}

// newRequeueLimiter wraps the controller's own rate limiter.
func newRequeueLimiter(inner workqueue.TypedRateLimiter[reconcile.Request]) *requeueLimiter {
	return &requeueLimiter{TypedRateLimiter: inner, due: map[reconcile.Request]time.Duration{}}
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
