package fsm

import (
	"cmp"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ownedType is a type declared with Owns, resolved against the scheme.
type ownedType struct {
	gvk          schema.GroupVersionKind
	unstructured bool
}

// resolveOwned resolves the Owns declarations once, so that a handler's
// Apply checks its child's type with a map lookup.
func resolveOwned(objs []client.Object, scheme *runtime.Scheme) (map[schema.GroupKind]ownedType, error) {
	owned := make(map[schema.GroupKind]ownedType, len(objs))
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, scheme)
		if err != nil {
			return nil, fmt.Errorf("Owns(%T): %w", o, err)
		}
		_, isUnstructured := o.(runtime.Unstructured)
		owned[gvk.GroupKind()] = ownedType{gvk: gvk, unstructured: isUnstructured}
	}
	return owned, nil
}

// newObject returns an empty object of an owned type, typed or
// unstructured as the type was declared, so that reads go to the same
// informer that the Owns watch started.
func (t ownedType) newObject(scheme *runtime.Scheme) client.Object {
	if !t.unstructured {
		if o, err := scheme.New(t.gvk); err == nil {
			if obj, ok := o.(client.Object); ok {
				return obj
			}
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(t.gvk)
	return u
}

func (t ownedType) newList(scheme *runtime.Scheme) client.ObjectList {
	listGVK := t.gvk.GroupVersion().WithKind(t.gvk.Kind + "List")
	if !t.unstructured {
		if o, err := scheme.New(listGVK); err == nil {
			if list, ok := o.(client.ObjectList); ok {
				return list
			}
		}
	}
	u := &unstructured.UnstructuredList{}
	u.SetGroupVersionKind(listGVK)
	return u
}

// owned returns the declared type of a child, or an UndeclaredOutputError.
func (r *reconciler[T]) owned(child client.Object) (ownedType, error) {
	gvk, err := apiutil.GVKForObject(child, r.client.Scheme())
	if err != nil {
		return ownedType{}, fmt.Errorf("cannot tell the kind of child %T: %w", child, err)
	}
	t, ok := r.owns[gvk.GroupKind()]
	if !ok {
		return ownedType{}, &UndeclaredOutputError{Machine: r.m.name, Kind: gvk.GroupKind()}
	}
	return t, nil
}

// locate completes a child's namespace: a namespaced child without one
// goes in its parent's namespace.
func (w *walker[T]) locate(child client.Object, t ownedType) (namespaced bool, err error) {
	namespaced, err = w.r.namespaced(t)
	if err != nil {
		return false, fmt.Errorf("cannot tell whether %s is namespaced: %w", t.gvk.Kind, err)
	}
	switch {
	case namespaced && child.GetNamespace() == "":
		if w.obj.GetNamespace() == "" {
			return false, fmt.Errorf("%s %s needs a namespace: its parent is cluster-scoped", t.gvk.Kind, child.GetName())
		}
		child.SetNamespace(w.obj.GetNamespace())
	case !namespaced && child.GetNamespace() != "":
		return false, fmt.Errorf("%s is cluster-scoped: %s cannot be in namespace %s", t.gvk.Kind, child.GetName(), child.GetNamespace())
	}
	if child.GetName() == "" {
		return false, fmt.Errorf("a %s child needs a name", t.gvk.Kind)
	}
	return namespaced, nil
}

// namespaced reports whether children of type t are namespaced. A type's
// scope never changes, so it is asked of the REST mapper once: asking on
// every apply cost a fifth of kfsm's allocations.
func (r *reconciler[T]) namespaced(t ownedType) (bool, error) {
	if scope, ok := r.scopes.Load(t.gvk); ok {
		return scope.(bool), nil
	}
	probe := &unstructured.Unstructured{}
	probe.SetGroupVersionKind(t.gvk)
	namespaced, err := r.client.IsObjectNamespaced(probe)
	if err != nil {
		return false, err // not remembered: the type may be installed later
	}
	r.scopes.Store(t.gvk, namespaced)
	return namespaced, nil
}

// String names the child as kubectl would: Kind[.group] [namespace/]name.
func (o OutputRef) String() string {
	kind := o.Kind
	if o.Group != "" {
		kind += "." + o.Group
	}
	if o.Namespace == "" {
		return kind + " " + o.Name
	}
	return kind + " " + o.Namespace + "/" + o.Name
}

func (o OutputRef) key() OutputRef {
	return OutputRef{Group: o.Group, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
}

func compareRefs(a, b OutputRef) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// output returns the record of ref in the status, if there is one.
func (w *walker[T]) output(ref OutputRef) (OutputRef, bool) {
	i, found := slices.BinarySearchFunc(w.st.Outputs, ref, compareRefs)
	if !found {
		return OutputRef{}, false
	}
	return w.st.Outputs[i], true
}

// fits refuses a child that status.outputs cannot record: a field longer
// than its bound, or a child more than the list holds.
func (w *walker[T]) fits(ref OutputRef) error {
	for _, f := range [...]struct {
		name, value string
		limit       int
	}{
		{"group", ref.Group, maxGroup}, {"kind", ref.Kind, maxKind}, {"namespace", ref.Namespace, maxNamespace},
		{"name", ref.Name, maxName}, {"uid", string(ref.UID), maxUID},
	} {
		if len(f.value) > f.limit {
			return &OutputLimitError{Child: ref, Field: f.name, Limit: f.limit}
		}
	}
	if _, recorded := w.output(ref); !recorded && len(w.st.Outputs) >= maxOutputs {
		return &OutputLimitError{Child: ref, Field: "outputs", Limit: maxOutputs}
	}
	return nil
}

// recordOutput notes that ref was applied: in this run's desired set and in
// the status.
func (w *walker[T]) recordOutput(ref OutputRef) {
	if !slices.ContainsFunc(w.applied, func(a OutputRef) bool { return a.key() == ref.key() }) {
		w.applied = append(w.applied, ref)
	}
	outs := &w.st.Outputs
	i, found := slices.BinarySearchFunc(*outs, ref, compareRefs)
	switch {
	case !found:
		*outs = slices.Insert(*outs, i, ref)
	case (*outs)[i] != ref:
		(*outs)[i] = ref
	}
}

func (w *walker[T]) forgetOutput(ref OutputRef) {
	if i, found := slices.BinarySearchFunc(w.st.Outputs, ref, compareRefs); found {
		w.st.Outputs = slices.Delete(w.st.Outputs, i, i+1)
	}
	w.applied = slices.DeleteFunc(w.applied, func(a OutputRef) bool { return a.key() == ref.key() })
}
