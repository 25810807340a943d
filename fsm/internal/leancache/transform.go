package leancache

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// After returns co with f run after each transform that it gives, and
// alone where it would give none. It leaves co's maps as they were.
func After(co cache.Options, f func(obj any)) cache.Options {
	co.DefaultTransform = then(co.DefaultTransform, f)
	co.DefaultNamespaces = configs(co.DefaultNamespaces, f)
	if co.ByObject != nil {
		byObject := make(map[client.Object]cache.ByObject, len(co.ByObject))
		for obj, b := range co.ByObject {
			// A nil transform here defaults to the default one, made
			// above.
			if b.Transform != nil {
				b.Transform = then(b.Transform, f)
			}
			b.Namespaces = configs(b.Namespaces, f)
			byObject[obj] = b
		}
		co.ByObject = byObject
	}
	return co
}

func configs(in map[string]cache.Config, f func(any)) map[string]cache.Config {
	if in == nil {
		return nil
	}
	out := make(map[string]cache.Config, len(in))
	for ns, c := range in {
		if c.Transform != nil {
			c.Transform = then(c.Transform, f)
		}
		out[ns] = c
	}
	return out
}

// then returns a transform that runs t, if any, and then f.
func then(t toolscache.TransformFunc, f func(any)) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		if t != nil {
			out, err := t(obj)
			if err != nil {
				return nil, err
			}
			obj = out
		}
		f(obj)
		return obj, nil
	}
}

// scoped is a manager's cache that remembers the options it was made
// with, so that fsm can list from the API server what it watches and
// nothing more.
type scoped struct {
	cache.Cache
	opts cache.Options
}

// Scoped returns c, made with co (by a manager, which sets its Scheme),
// as a cache that Namespaces can ask which namespaces it watches.
func Scoped(c cache.Cache, co cache.Options) cache.Cache { return scoped{c, co} }

// Namespaces returns the namespaces whose objects of kind gvk c watches,
// sorted, as the options that Scoped was given say: ByObject's for the
// kind, else DefaultNamespaces. It returns nil when c watches every
// namespace, or the kind has none (a cache watches a cluster-scoped kind
// whole), or c was not made by Scoped and cannot say.
func Namespaces(c cache.Cache, gvk schema.GroupVersionKind) []string {
	s, _ := c.(scoped)
	if s.opts.Mapper != nil {
		if namespaced, err := apiutil.IsGVKNamespaced(gvk, s.opts.Mapper); err == nil && !namespaced {
			return nil
		}
	}
	watched := s.opts.DefaultNamespaces
	for obj, by := range s.opts.ByObject {
		if kind, err := apiutil.GVKForObject(obj, s.opts.Scheme); err == nil && kind == gvk && by.Namespaces != nil {
			watched = by.Namespaces
		}
	}
	if _, all := watched[metav1.NamespaceAll]; all {
		return nil
	}
	return slices.Sorted(maps.Keys(watched))
}
