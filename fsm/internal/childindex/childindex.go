// Package childindex finds a machine's children by their parent's UID,
// under a manager: it is the index that package fsm keeps for each
// machine, fed by the first of its event filters.
package childindex

import (
	"reflect"
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Index finds a machine's children of its typed owned types by their
// parent's UID, the value of a label (package fsm's LabelOwnerUID), so
// that finding a parent's children costs the number of its children, not
// the number of objects in the cache. Unstructured types are left to
// label selectors.
//
// It is kept by the first of the machine's event filters, which every
// event of every watch passes before any other filter or handler: a
// child is filed before its event can start a reconcile, so that
// reconcile finds it, and kfsm's own writes are filed too although the
// echo filter drops their events. (An index kept by a handler of its own
// lags: the informer runs each handler on a goroutine of its own, in no
// fixed order.) The two watches of a child's type each file its events,
// each in order but not in step with the other, so an entry keeps the
// resourceVersion that filed it and an older one never undoes it. An
// entry can outlive its child for a moment (a late watch files it again
// before it hears of the deletion); package fsm reads every entry from
// the cache and takes only a child that still carries the parent's UID.
//
// It holds one small entry per child: about 0.2 KB per parent with two
// children in the bench's heap profiles, where a field index of
// controller-runtime's cache, which files each child under two keys, each
// with a set of its own, holds about 1.3 KB.
type Index struct {
	label string // whose value is the parent's UID
	// The indexed types, numbered by their Go type and by their kind.
	byType map[reflect.Type]uint16
	byKind map[schema.GroupKind]uint16

	mu       sync.RWMutex
	byParent map[types.UID][]indexedChild
}

type indexedChild struct {
	key  types.NamespacedName
	rv   uint64 // the resourceVersion that filed it; 0 if not a number
	kind uint16
}

// New indexes the children of the given kinds, which must have Go types
// in scheme, by the parent UID in their label.
func New(label string, scheme *runtime.Scheme, kinds []schema.GroupVersionKind) *Index {
	x := &Index{label: label, byType: map[reflect.Type]uint16{}, byKind: map[schema.GroupKind]uint16{}, byParent: map[types.UID][]indexedChild{}}
	for _, gvk := range kinds {
		if o, err := scheme.New(gvk); err == nil {
			n := uint16(len(x.byKind))
			x.byType[reflect.TypeOf(o)], x.byKind[gvk.GroupKind()] = n, n
		}
	}
	return x
}

// Children returns the keys of the children of type gk of the parent
// with uid; ok is false if the index does not hold the type.
func (x *Index) Children(gk schema.GroupKind, uid types.UID) (keys []types.NamespacedName, ok bool) {
	if x == nil {
		return nil, false
	}
	kind, ok := x.byKind[gk]
	if !ok {
		return nil, false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, c := range x.byParent[uid] {
		if c.kind == kind {
			keys = append(keys, c.key)
		}
	}
	return keys, true
}

// Filter files what each event says and lets every event pass.
func (x *Index) Filter() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(ev event.CreateEvent) bool {
			x.file(nil, ev.Object, false)
			return true
		},
		UpdateFunc: func(ev event.UpdateEvent) bool {
			x.file(ev.ObjectOld, ev.ObjectNew, false)
			return true
		},
		DeleteFunc: func(ev event.DeleteEvent) bool {
			x.file(nil, ev.Object, true)
			return true
		},
	}
}

// file records an event of obj, which was old before an update, or is
// gone.
func (x *Index) file(old, obj client.Object, gone bool) {
	kind, ok := x.byType[reflect.TypeOf(obj)]
	if !ok {
		return
	}
	parent := types.UID(obj.GetLabels()[x.label])
	from := parent
	if old != nil {
		from = types.UID(old.GetLabels()[x.label])
	}
	if parent == "" && from == "" {
		return
	}
	c := indexedChild{key: client.ObjectKeyFromObject(obj), kind: kind}
	c.rv, _ = strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	x.mu.Lock()
	defer x.mu.Unlock()
	if gone || from != parent {
		x.remove(from, c)
	}
	if !gone && parent != "" {
		x.put(parent, c)
	}
}

// remove drops c's entry under parent, unless a later version filed it.
func (x *Index) remove(parent types.UID, c indexedChild) {
	kept := slices.DeleteFunc(x.byParent[parent], func(e indexedChild) bool {
		return e.kind == c.kind && e.key == c.key && e.rv <= c.rv
	})
	if len(kept) == 0 {
		delete(x.byParent, parent)
	} else {
		x.byParent[parent] = kept
	}
}

// put files c under parent, unless a later version filed it already.
func (x *Index) put(parent types.UID, c indexedChild) {
	entries := x.byParent[parent]
	i := slices.IndexFunc(entries, func(e indexedChild) bool { return e.kind == c.kind && e.key == c.key })
	switch {
	case i < 0:
		x.byParent[parent] = append(entries, c)
	case entries[i].rv < c.rv:
		entries[i].rv = c.rv
	}
}
