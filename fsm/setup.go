package fsm

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kfsm/kfsm/fsm/internal/childindex"
	"github.com/kfsm/kfsm/fsm/internal/eventwriter"
	"github.com/kfsm/kfsm/fsm/internal/leancache"
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
	r.watched = leancache.Namespaces(mgr.GetCache(), r.gvk)
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
	r.limiter = &requeueLimiter{TypedRateLimiter: rateLimiter(mgr, opts), due: map[reconcile.Request]time.Duration{}}
	opts.RateLimiter = r.limiter
	if m.shards != nil {
		r.countAdds(mgr, &opts)
	}
	return m.controller(mgr, r).WithOptions(opts).Complete(r)
}

// eventWriter makes the writer of the machine's events, which runs with
// mgr.
func (m *Machine[T]) eventWriter(mgr manager.Manager) (*eventwriter.Writer, error) {
	// Events are a built-in kind: protobuf costs less than JSON to
	// encode here and to decode on the API server.
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.ContentType = runtime.ContentTypeProtobuf
	events, err := typedeventsv1.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
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
// told at start. Each takes an unservedGuard before it starts, where it
// can: a cache of some namespaces hands out informers that take no
// handler, a manager that runs already has started them, and a kind whose
// CRD is not installed yet has none; those keep client-go's handler.
func (m *Machine[T]) informers(mgr manager.Manager, r *reconciler[T]) error {
	d, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("machine %s: %w", m.name, err)
	}
	guard := func(obj client.Object, informer cache.Informer) {
		gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
		if err != nil {
			return
		}
		mapping, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if setter, ok := informer.(watchErrorHandlerSetter); ok && err == nil {
			g := &unservedGuard{resource: mapping.Resource, discovery: d, log: mgr.GetLogger().WithName("kfsm")}
			_ = setter.SetWatchErrorHandlerWithContext(g.handle) // fails once started
		}
	}
	own := newObject[T]()
	if informer, err := mgr.GetCache().GetInformer(context.Background(), own, cache.BlockUntilSynced(false)); err == nil {
		guard(own, informer) // the controller watches it; a kind not installed yet has none
	}
	for _, t := range r.owns {
		if t.unstructured {
			continue
		}
		obj := t.newObject(mgr.GetScheme())
		informer, err := mgr.GetCache().GetInformer(context.Background(), obj)
		if err != nil {
			return fmt.Errorf("machine %s: watching %s children: %w", m.name, t.gvk.Kind, err)
		}
		guard(obj, informer)
	}
	return nil
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

// When the CustomResourceDefinition of a kind is deleted while the
// operator runs, every list and watch of the kind fails with NotFound,
// and client-go's reflector retries for ever, after a backoff that grows
// to about 30 s, logging each failure as an error (with a stack trace,
// under controller-runtime's zap logger). An unservedGuard, the watch
// error handler of one informer, logs one line instead and holds the
// reflector, which makes no request meanwhile, until discovery lists the
// resource again.
//
// It holds rather than stops: the informer, the controllers' event
// handlers on it and its store (empty by then: the API server deleted the
// objects before the CRD) stay, so that the reflector lists and watches
// the resource again as after any failure, and the machines reconcile its
// new objects in the same process. Stopping the informer would need the
// controller's watch of the kind made anew, with predicates that only the
// builder holds; stopping the manager, so that the process restarts,
// would stop its other controllers too, and fail at every start while
// the CRD is missing.

// unservedPoll is how often a guard asks discovery whether its resource
// is served again: one small request, only while it is not.
const unservedPoll = 10 * time.Second

// unservedGuard is the watch error handler of the informer of one
// resource.
type unservedGuard struct {
	resource  schema.GroupVersionResource
	discovery discovery.DiscoveryInterface
	log       logr.Logger
}

// handle is a toolscache.WatchErrorHandlerWithContext. It returns when
// the reflector may list and watch again, or when ctx ends.
func (g *unservedGuard) handle(ctx context.Context, r *toolscache.Reflector, err error) {
	if !apierrors.IsNotFound(err) || !g.gone(ctx) {
		toolscache.DefaultWatchErrorHandler(ctx, r, err)
		return
	}
	name := g.resource.Resource + "." + g.resource.Version + "." + g.resource.Group // as kubectl takes it
	g.log.Info("the API server no longer serves the resource (its CustomResourceDefinition was deleted, or no longer serves the version): its informer stops listing and watching it until it is served again",
		"resource", name, "checkEvery", unservedPoll)
	t := time.NewTicker(unservedPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if listed, err := g.listed(); err == nil && listed {
			g.log.Info("the API server serves the resource again: its informer lists and watches it again", "resource", name)
			return
		}
	}
}

// gone reports whether discovery confirms that a resource whose list or
// watch was not found is not served. Discovery drops a deleted CRD's
// resource a moment after the API server starts to refuse it, so it is
// asked again a second later.
func (g *unservedGuard) gone(ctx context.Context) bool {
	if listed, err := g.listed(); err != nil || !listed {
		return err == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Second):
	}
	listed, err := g.listed()
	return err == nil && !listed
}

// listed reports whether discovery lists the resource, which it does
// only once the API server serves it.
func (g *unservedGuard) listed() (bool, error) {
	list, err := g.discovery.ServerResourcesForGroupVersion(g.resource.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil // the whole group version is gone
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == g.resource.Resource {
			return true, nil
		}
	}
	return false, nil
}

// watchErrorHandlerSetter is a client-go informer, which takes a watch
// error handler until it starts.
type watchErrorHandlerSetter interface {
	SetWatchErrorHandlerWithContext(toolscache.WatchErrorHandlerWithContext) error
}
