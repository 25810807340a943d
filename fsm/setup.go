package fsm

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kfsm/kfsm/fsm/internal/childindex"
	"github.com/kfsm/kfsm/fsm/internal/eventwriter"
	"github.com/kfsm/kfsm/fsm/internal/unserved"
)

// SetupWithManager builds the machine and registers it with the manager as
// the controller of T, with the Owns and Watches triggers and the options
// given with WithOptions.
func (m *Machine[T]) SetupWithManager(mgr manager.Manager) error {
	if err := m.Build(); err != nil {
		return err
	}
	w, err := m.eventWriter(mgr)
	if err != nil {
		return err
	}
	r, err := newReconciler(m, mgr.GetClient(), mgr.GetAPIReader(), w)
	if err != nil {
		return err
	}
	var typed []schema.GroupVersionKind
	for _, t := range r.owns {
		if !t.unstructured {
			typed = append(typed, t.gvk)
		}
	}
	r.index = childindex.New(LabelOwnerUID, mgr.GetScheme(), typed)
	if err := m.informers(mgr, r); err != nil {
		return err
	}
	opts := m.options
	if m.shards != nil {
		if ptr.Deref(opts.NeedLeaderElection, false) {
			return fmt.Errorf("machine %s: a sharded machine runs on every replica; WithOptions asks for leader election", m.name)
		}
		opts.NeedLeaderElection = ptr.To(false)
		if err := r.shard(mgr, m.shards); err != nil {
			return fmt.Errorf("machine %s: %w", m.name, err)
		}
	}
	if !m.noPublish {
		if err := m.publishWith(mgr); err != nil {
			return err
		}
	}
	if err := mgr.Add(manager.RunnableFunc(r.actions.Drain)); err != nil {
		return fmt.Errorf("machine %s: %w", m.name, err)
	}
	if m.shards == nil {
		// A replica checks the objects of each slot it takes; a leader
		// checks them all when it begins to lead.
		r.caughtUp = make(chan struct{})
		if err := mgr.Add(manager.RunnableFunc(r.catchUp)); err != nil {
			return fmt.Errorf("machine %s: %w", m.name, err)
		}
	}
	if m.workers > 0 {
		opts.MaxConcurrentReconciles = m.workers
	}
	r.limiter = newRequeueLimiter(rateLimiter(mgr, opts))
	opts.RateLimiter = r.limiter
	return m.controller(mgr, r).WithOptions(opts).Complete(r)
}

// eventWriter makes the writer of the machine's events, which runs with
// mgr.
func (m *Machine[T]) eventWriter(mgr manager.Manager) (*eventwriter.Writer, error) {
	events, err := typedeventsv1.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("machine %s: a client of events: %w", m.name, err)
	}
	w := eventwriter.New(events, mgr.GetScheme(), m.FieldOwner(), logf.Log.WithName("kfsm").WithValues("machine", m.name), eventwriter.Options{})
	if err := mgr.Add(w); err != nil {
		return nil, fmt.Errorf("machine %s: %w", m.name, err)
	}
	return w, nil
}

// informers makes the informers of the machine's kind and of its typed
// owned types, which start with the cache, so that the manager's cache
// sync covers them: an operator whose role may not list a child's kind is
// told at start. All of them take the guard of unserved kinds before they
// start: a deleted CRD of one of these kinds holds its informer until the
// CRD is back.
func (m *Machine[T]) informers(mgr manager.Manager, r *reconciler[T]) error {
	kinds := []client.Object{newObject[T]()}
	for _, t := range r.owns {
		if t.unstructured {
			continue
		}
		obj := t.newObject(mgr.GetScheme())
		if _, err := mgr.GetCache().GetInformer(context.Background(), obj); err != nil {
			return fmt.Errorf("machine %s: watching %s children: %w", m.name, t.gvk.Kind, err)
		}
		kinds = append(kinds, obj)
	}
	if err := unserved.Guard(mgr, kinds...); err != nil {
		return fmt.Errorf("machine %s: %w", m.name, err)
	}
	return nil
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

// controller is the builder of the machine's controller, with its
// watches and their filters.
func (m *Machine[T]) controller(mgr manager.Manager, r *reconciler[T]) *builder.Builder {
	b := builder.ControllerManagedBy(mgr).Named(m.name).
		For(newObject[T](), m.forOpts...).
		WatchesRawSource(source.Func(r.start)).
		// Global filters, because the builder's WithPredicates options
		// replace one another, and in this order: the index files every
		// child before its event can start a reconcile; a sharded
		// replica's cache catching up on slots it takes starts none (it
		// queues their objects itself); and kfsm's own writes, which come
		// back as events, must not drive the loop.
		WithEventFilter(r.index.Filter())
	if r.shards != nil { // joined its replica in SetupWithManager, before
		b = b.WithEventFilter(r.shards.CatchUpFilter(r.kindOf, r.echoed))
	}
	b = b.WithEventFilter(r.echoes.Filter(r.roleOf, r.echoed))
	for i, o := range m.owns {
		b = b.Owns(o, m.ownsOpts[i]...).
			Watches(o, handler.EnqueueRequestsFromMapFunc(r.parentOf))
	}
	for _, w := range m.watches {
		b = b.Watches(w.obj, handler.EnqueueRequestsFromMapFunc(w.fn), w.opts...)
	}
	for _, f := range m.filters {
		b = b.WithEventFilter(f)
	}
	return b
}

// Reconciler builds the machine and returns the reconciler that
// SetupWithManager registers, reading and writing through c and recording
// events with rec. Tests use it to run a machine one reconcile at a time.
// A handler's failure is returned as a *HandlerError (wrapped in
// reconcile.TerminalError once retries are exhausted), whose RetryAfter
// says when the machine would run it again.
//
// The reconciler is also a source.TypedSource[reconcile.Request], as the
// one that SetupWithManager registers with the controller: whoever runs
// it starts it with a queue, to which the machine adds the objects whose
// actions ask for a reconcile (an action ended, saved a checkpoint or
// beat), and the context's end cancels the actions. Unstarted, nothing
// tells of them, and a checkpoint waits for ever (fsmtest's step driver
// starts it).
func (m *Machine[T]) Reconciler(c client.Client, rec events.EventRecorder) (reconcile.Reconciler, error) {
	if err := m.Build(); err != nil {
		return nil, err
	}
	r, err := newReconciler(m, c, c, rec)
	if err != nil {
		return nil, err
	}
	return unmanaged[T]{r}, nil
}

// unmanaged is a reconciler run without a manager, and the source of the
// requests of its actions.
type unmanaged[T Object] struct{ *reconciler[T] }

var _ source.TypedSource[reconcile.Request] = unmanaged[Object]{}

// Start gives the actions the queue of whoever runs the reconciler, as
// SetupWithManager gives them the controller's.
func (u unmanaged[T]) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return u.actions.Start(ctx, q)
}
