// Package backoff times the requeues of a machine's controller: kfsm's
// own backoff after a handler failed, and the controller's rate limiter
// for every other requeue.
package backoff

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Failed attempts back off exponentially between these bounds.
const (
	base = time.Second
	most = 5 * time.Minute
)

// After is how long an object waits after its failures-th failed attempt
// in a row: 1 s, doubling up to 5 min.
func After(failures int32) time.Duration {
	d := base
	for i := int32(1); i < failures && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// Limiter is the rate limiter of a machine's controller. An object whose
// handler failed is requeued when kfsm's backoff says; every other
// requeue is the controller's own rate limiter's to time.
type Limiter struct {
	workqueue.TypedRateLimiter[reconcile.Request]

	mu  sync.Mutex
	due map[reconcile.Request]time.Duration
}

// New wraps the controller's own rate limiter.
func New(inner workqueue.TypedRateLimiter[reconcile.Request]) *Limiter {
	return &Limiter{TypedRateLimiter: inner, due: map[reconcile.Request]time.Duration{}}
}

// RetryIn sets the delay of the next rate-limited requeue of req.
func (l *Limiter) RetryIn(req reconcile.Request, after time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.due[req] = after
}

// When is the delay of req's next rate-limited requeue.
func (l *Limiter) When(req reconcile.Request) time.Duration {
	l.mu.Lock()
	after, ok := l.due[req]
	delete(l.due, req)
	l.mu.Unlock()
	if ok {
		return after
	}
	return l.TypedRateLimiter.When(req)
}
