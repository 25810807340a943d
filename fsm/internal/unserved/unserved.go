// Package unserved keeps an informer quiet while the API server does not
// serve its resource.
package unserved

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

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

// Guard gives the informers of the manager's cache for objs an
// unservedGuard each, where it can: the informers that a cache of the
// whole cluster makes before the manager starts. A cache of some
// namespaces hands out informers that take no handler, a manager that
// runs already has started them, and a kind whose CRD is not installed
// yet has none: those keep client-go's handler.
func Guard(mgr manager.Manager, objs ...client.Object) error {
	d, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	log := mgr.GetLogger().WithName("kfsm")
	for _, obj := range objs {
		gvk, err := apiutil.GVKForObject(obj, mgr.GetScheme())
		if err != nil {
			return err
		}
		mapping, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			continue // not installed yet
		}
		informer, err := mgr.GetCache().GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
		if err != nil {
			continue
		}
		setter, ok := informer.(watchErrorHandlerSetter)
		if !ok {
			continue
		}
		g := &unservedGuard{resource: mapping.Resource, discovery: d, log: log}
		_ = setter.SetWatchErrorHandlerWithContext(g.handle) // fails once started
	}
	return nil
}
