package fsm

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/echo"
)

// roleOf says whether obj is one of the machine's objects, a child, or
// neither, for the echo filter.
func (r *reconciler[T]) roleOf(obj client.Object) (schema.GroupKind, echo.Role) {
	gvk, err := apiutil.GVKForObject(obj, r.client.Scheme())
	if err != nil {
		return schema.GroupKind{}, echo.Other
	}
	switch gk := gvk.GroupKind(); {
	case gk == r.gk:
		return gk, echo.Parent
	case r.owns[gk] != (ownedType{}):
		return gk, echo.Child
	default:
		return gk, echo.Other
	}
}

// kindOf says of which kind obj is when it is one of the machine's
// objects or a child, for the catch-up filter of a sharded machine.
func (r *reconciler[T]) kindOf(obj client.Object) (schema.GroupKind, bool) {
	gk, role := r.roleOf(obj)
	return gk, role != echo.Other
}

// echoed hands the echo of one of kfsm's writes of an object, which the
// echo filter drops, to the machine's Watches of its own kind: the write
// is no news for the object written, but it is for the other objects a
// watch maps it to (a moose's friends). The cache has the written version
// by then. Echoes of children are not handed on, so that a watch mapping
// a child to its parent cannot make kfsm's applies drive the loop. The
// catch-up filter of a sharded machine hands on what it drops too: an
// object of a slot the replica takes is queued when the slot is, but
// its friends would not hear that it changed.
func (r *reconciler[T]) echoed(gk schema.GroupKind, obj client.Object) {
	if gk != r.gk {
		return
	}
	for _, w := range r.m.watches {
		if wgvk, err := apiutil.GVKForObject(w.obj, r.client.Scheme()); err != nil || wgvk.GroupKind() != gk {
			continue
		}
		for _, req := range w.fn(context.Background(), obj) {
			if req.NamespacedName != client.ObjectKeyFromObject(obj) {
				r.requeue(req.NamespacedName)
			}
		}
	}
}

// parentOf maps a child that carries no owner reference back to its
// parent through the labels and annotation that Apply put on it. Children
// with a controller reference are left to the Owns watch. A child whose
// parent this manager cannot see, or whose parent is another object of
// the same name, is not this machine's business.
func (r *reconciler[T]) parentOf(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetLabels()[LabelMachine] != r.m.name || metav1.GetControllerOf(o) != nil {
		return nil
	}
	owner := o.GetAnnotations()[AnnotationOwner]
	if owner == "" {
		return nil
	}
	ns, name, found := strings.Cut(owner, "/")
	if !found {
		ns, name = "", owner
	}
	key := client.ObjectKey{Namespace: ns, Name: name}
	parent := newObject[T]()
	if err := r.client.Get(ctx, key, parent, client.UnsafeDisableDeepCopy); err != nil || string(parent.GetUID()) != o.GetLabels()[LabelOwnerUID] {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}
