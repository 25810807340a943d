package fsm

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
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
	case clock.RealClock, *clock.RealClock:
		return nil
	case clock.WithDelayedExecution:
		return c
	}
	return nil
}
