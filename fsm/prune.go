package fsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm/internal/echo"
	"github.com/kfsm/kfsm/fsm/sharding"
)

// remove is Request.Delete.
func (w *walker[T]) remove(ctx context.Context, child client.Object) error {
	err := w.removeChild(ctx, child)
	if err != nil && w.outputErr == nil {
		w.outputErr = err
	}
	return err
}

func (w *walker[T]) removeChild(ctx context.Context, child client.Object) error {
	t, err := w.r.owned(child)
	if err != nil {
		return err
	}
	if _, err := w.locate(child, t); err != nil {
		return err
	}
	ref := OutputRef{Group: t.gvk.Group, Kind: t.gvk.Kind, Namespace: child.GetNamespace(), Name: child.GetName()}
	if i, found := slices.BinarySearchFunc(w.st.Outputs, ref, compareRefs); found {
		ref = w.st.Outputs[i]
	} else {
		// Not in the status: it is a child only if it carries the labels
		// kfsm applies, for example after a crash before the status write.
		obj := t.newObject(w.r.client.Scheme())
		if err := w.r.client.Get(ctx, client.ObjectKeyFromObject(child), obj); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("deleting %s: %w", ref, err)
		}
		if obj.GetLabels()[LabelOwnerUID] != string(w.obj.GetUID()) {
			return fmt.Errorf("%s is not a child that kfsm applied for %s; it was left alone", ref, client.ObjectKeyFromObject(w.obj))
		}
		ref.UID = obj.GetUID()
	}
	if err := w.r.deleteChild(ctx, client.ObjectKeyFromObject(w.obj), ref, t); err != nil {
		return err
	}
	w.forgetOutput(ref)
	return nil
}

// deleteChild deletes one child, only if it is still the object kfsm
// applied (same UID); a child already gone is fine.
func (r *reconciler[T]) deleteChild(ctx context.Context, parent types.NamespacedName, ref OutputRef, t ownedType) error {
	obj := t.newObject(r.client.Scheme())
	obj.SetNamespace(ref.Namespace)
	obj.SetName(ref.Name)
	opts := []client.DeleteOption{client.PropagationPolicy(metav1.DeletePropagationBackground)}
	if ref.UID != "" {
		opts = append(opts, client.Preconditions{UID: &ref.UID})
	}
	key := echo.Key{GroupKind: t.gvk.GroupKind(), NamespacedName: client.ObjectKeyFromObject(obj)}
	r.echoes.Begin(key, nil)
	err := r.client.Delete(ctx, obj, opts...)
	if apierrors.IsConflict(err) {
		err = r.goneOrNotOurs(ctx, t, ref, err)
	}
	if r.echoes.Deleted(key, ref.UID, err == nil) {
		r.requeue(parent)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", ref, err)
	}
	return nil
}

// goneOrNotOurs looks at a child whose delete met a conflict: if the
// object of its name is another one, or none, kfsm's child is gone;
// otherwise the conflict stands and the delete is tried again later.
func (r *reconciler[T]) goneOrNotOurs(ctx context.Context, t ownedType, ref OutputRef, conflict error) error {
	live := t.newObject(r.client.Scheme())
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, live)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return errors.Join(conflict, err)
	case ref.UID != "" && live.GetUID() != ref.UID:
		return nil // the name now belongs to another object
	}
	return conflict
}

// children returns the object's children: those in its status and those
// that carry its owner UID label, such as a child applied just before a
// crash kept it out of the status. The status is the fresher record of
// the two for a child in both.
func (w *walker[T]) children(ctx context.Context) ([]OutputRef, error) {
	refs := slices.Clone(w.st.Outputs)
	uid := w.obj.GetUID()
	for _, t := range w.r.owns {
		recorded := func(key types.NamespacedName) bool {
			ref := OutputRef{Group: t.gvk.Group, Kind: t.gvk.Kind, Namespace: key.Namespace, Name: key.Name}
			return slices.ContainsFunc(refs, func(r OutputRef) bool { return r.key() == ref })
		}
		err := w.r.eachChild(ctx, t, uid, recorded, func(obj client.Object) {
			ref := OutputRef{Group: t.gvk.Group, Kind: t.gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(),
				State: State(obj.GetAnnotations()[AnnotationState]), UID: obj.GetUID()}
			if obj.GetAnnotations()[AnnotationAdopted] == "true" {
				ref.Adopted = ptr.To(true)
			}
			refs = append(refs, ref)
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s children: %w", t.gvk.Kind, err)
		}
	}
	return refs, nil
}

// eachChild calls f with each child of type t of the parent with uid that
// is not known already. Under a manager, it reads from the cache the
// children that the machine's index holds and known does not; where there
// is no index (an unstructured type, or a reconciler without a manager),
// it lists them by label.
func (r *reconciler[T]) eachChild(ctx context.Context, t ownedType, uid types.UID, known func(types.NamespacedName) bool, f func(client.Object)) error {
	if keys, ok := r.index.Children(t.gvk.GroupKind(), uid); ok {
		for _, key := range keys {
			if known(key) {
				continue
			}
			obj := t.newObject(r.client.Scheme())
			err := r.client.Get(ctx, key, obj, client.UnsafeDisableDeepCopy)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			// The cache's own object: read, never changed. An entry can
			// outlive a move or a deletion for a moment.
			if obj.GetLabels()[LabelOwnerUID] == string(uid) {
				f(obj)
			}
		}
		return nil
	}
	list := t.newList(r.client.Scheme())
	if err := r.client.List(ctx, list, client.MatchingLabels{LabelOwnerUID: string(uid)}, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	// Maybe the cache's own objects: read, never changed.
	return meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok && !known(client.ObjectKeyFromObject(obj)) {
			f(obj)
		}
		return nil
	})
}

// prune deletes the children that are no longer desired. A pipeline pass
// that reached a final state desires what it applied; a lifecycle state
// whose handler returned Done desires what that run applied, among the
// children that state applied before. At the end of the deletion path,
// all is set and every child goes. Adopted children are released, not
// deleted.
func (w *walker[T]) prune(ctx context.Context, state State, all bool) error {
	refs, err := w.children(ctx)
	if err != nil {
		return err
	}
	parent := client.ObjectKeyFromObject(w.obj)
	for _, ref := range refs {
		if !all {
			if slices.ContainsFunc(w.applied, func(a OutputRef) bool { return a.key() == ref.key() }) {
				continue
			}
			if w.r.m.mode == Lifecycle && ref.State != state {
				continue
			}
		}
		t, ok := w.r.owns[schema.GroupKind{Group: ref.Group, Kind: ref.Kind}]
		if !ok {
			// Recorded by an older version of the machine that owned the
			// type: deleting it now would need the type's scheme.
			continue
		}
		why := "no longer desired"
		if all {
			why = "its parent is being deleted"
		}
		if ptr.Deref(ref.Adopted, false) {
			if err := w.r.release(ctx, ref, t); err != nil {
				return err
			}
			w.forgetOutput(ref)
			w.r.event(w.obj, childRef(t.gvk, ref), corev1.EventTypeNormal, ReasonReleased, "Release",
				fmt.Sprintf("released %s, which kfsm adopted and does not delete: %s", ref, why))
			continue
		}
		if err := w.r.deleteChild(ctx, parent, ref, t); err != nil {
			return err
		}
		w.forgetOutput(ref)
		if w.log.Enabled() {
			w.log.Info("pruned", "machine", w.r.m.name, "child", ref.String(), "why", why)
		}
		w.r.event(w.obj, childRef(t.gvk, ref), corev1.EventTypeNormal, ReasonPruned, "Delete", fmt.Sprintf("deleted %s: %s", ref, why))
	}
	return nil
}

// release takes kfsm's labels and annotations off an adopted child and
// leaves the object as it is otherwise.
func (r *reconciler[T]) release(ctx context.Context, ref OutputRef, t ownedType) error {
	obj := t.newObject(r.client.Scheme())
	obj.SetNamespace(ref.Namespace)
	obj.SetName(ref.Name)
	patch := map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{LabelManagedBy: nil, LabelMachine: nil, LabelOwnerUID: nil, sharding.LabelSlot: nil},
		"annotations": map[string]any{AnnotationOwner: nil, AnnotationState: nil, AnnotationAdopted: nil},
	}}
	if ref.UID != "" {
		patch["metadata"].(map[string]any)["uid"] = ref.UID // a precondition: never another object
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	err = r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, data), client.FieldOwner(r.m.FieldOwner()))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another object took the name
	}
	if err != nil {
		return fmt.Errorf("releasing %s: %w", ref, err)
	}
	return nil
}
