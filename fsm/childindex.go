package fsm

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// childIndex is the cache's field index of a machine's owned types: it
// files each object by the value of its LabelOwnerUID, so that finding a
// parent's children costs the number of its children, not the number of
// objects in the cache. The cache's store files an object in its indexes
// as it stores the object, before any handler hears of it, so a reconcile
// that a child's event started finds that child. (An index kept from the
// informer's events lags the cache: a child created after its parent had
// converged could be missed until the next resync.) It is the public
// field index, which every cache of controller-runtime keeps, namespaced
// ones included.
type childIndex struct {
	cache cache.Cache
	field string // the index's name: one per machine, as names may not repeat
	types map[schema.GroupKind]bool
}

// indexChildren indexes the children of each typed owned type by their
// parent's UID. Unstructured types are left to label selectors.
func (r *reconciler[T]) indexChildren(ctx context.Context, c cache.Cache) error {
	x := &childIndex{cache: c, field: LabelOwnerUID + "." + r.m.name, types: map[schema.GroupKind]bool{}}
	for gk, t := range r.owns {
		if t.unstructured {
			continue
		}
		err := c.IndexField(ctx, t.newObject(r.client.Scheme()), x.field, func(o client.Object) []string {
			if uid := o.GetLabels()[LabelOwnerUID]; uid != "" {
				return []string{uid}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("indexing %s children by parent: %w", t.gvk.Kind, err)
		}
		x.types[gk] = true
	}
	r.index = x
	return nil
}

// list lists the children of type t of the parent with uid into list,
// and reports whether the type is indexed.
func (x *childIndex) list(ctx context.Context, t ownedType, uid string, list client.ObjectList) (bool, error) {
	if x == nil || !x.types[t.gvk.GroupKind()] {
		return false, nil
	}
	return true, x.cache.List(ctx, list, client.MatchingFields{x.field: uid}, client.UnsafeDisableDeepCopy)
}
