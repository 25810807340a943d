package leancache

import (
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
