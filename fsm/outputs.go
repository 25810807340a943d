package fsm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/applyjson"
	"github.com/kfsm/kfsm/fsm/internal/echo"
)

// managedBy is the value of LabelManagedBy on kfsm's children.
const managedBy = "kfsm"

// ApplyOption changes how [Request.Apply] applies a child.
type ApplyOption func(*applyOptions)

type applyOptions struct {
	force bool
	adopt adoption
}

// adoption is what Apply does with an existing object that kfsm did not
// create for the parent.
type adoption int

const (
	refuse adoption = iota
	adoptKeep
	adoptDelete
)

// Adopt lets Apply take over an object that already exists and that kfsm
// did not create for this parent, such as a namespace made by hand. kfsm
// applies its fields and labels to it, annotates it AnnotationAdopted,
// records it in Status.Outputs with Adopted set, and reconciles the
// parent when it changes; but it gives it no owner reference and never
// deletes it. When it is no longer desired, or the parent's deletion path
// ends, kfsm releases it: it removes its labels and annotations and
// leaves the object and its data in place. An object that belongs to
// another kfsm parent is not adopted.
func Adopt() ApplyOption { return func(o *applyOptions) { o.adopt = adoptKeep } }

// AdoptAndDelete is Adopt for an object that is to become a child like
// those kfsm creates: it gets an owner reference, and is pruned and
// deleted with its parent.
func AdoptAndDelete() ApplyOption { return func(o *applyOptions) { o.adopt = adoptDelete } }

// AlreadyExistsError is what [Request.Apply] returns for a child whose
// name is taken by an object that kfsm did not create for this parent,
// unless the apply passes [Adopt] or [AdoptAndDelete]. Nothing is
// written. The handler's state fails with reason AlreadyExists.
type AlreadyExistsError struct {
	Child OutputRef
	// Owner is the kfsm parent (namespace/name) that the object belongs
	// to, if it belongs to another one.
	Owner string

	gvk schema.GroupVersionKind
}

func (e *AlreadyExistsError) Error() string {
	if e.Owner != "" {
		return fmt.Sprintf("applying %s: it exists and belongs to another parent, %s; choose another name", e.Child, e.Owner)
	}
	return fmt.Sprintf("applying %s: it exists and kfsm did not create it; pass fsm.Adopt() to take it over and never delete it, or fsm.AdoptAndDelete() to make it a child like the others, or choose another name", e.Child)
}

// ForceOwnership takes over the fields that another field manager owns
// instead of failing with a [ConflictError]: the equivalent of kubectl
// apply --server-side --force-conflicts. Use it when kfsm's machine is
// meant to win over whoever else writes the child.
func ForceOwnership() ApplyOption { return func(o *applyOptions) { o.force = true } }

// ConflictError is what [Request.Apply] returns when another server-side
// applier owns fields that the child sets: two declarations disagree, and
// a person must decide. The handler's state then fails with reason
// ApplyConflict and the managers named in the Ready condition. Fields that
// were changed by updates rather than applies (kubectl edit, a controller
// that updates) are drift, and Apply takes them back without an error.
type ConflictError struct {
	Child    OutputRef
	Managers []string // the conflicting field managers
	Fields   []string // the contested fields, such as .data.key
	Err      error    // the API server's answer

	drift bool // every conflicting manager wrote with an update, not an apply
	gvk   schema.GroupVersionKind
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("applying %s: fields %s are owned by field manager %s; pass fsm.ForceOwnership() to take them over",
		e.Child, strings.Join(e.Fields, ", "), quoteAll(e.Managers))
}

func (e *ConflictError) Unwrap() error { return e.Err }

// UndeclaredOutputError is what [Request.Apply] and [Request.Delete]
// return for a child whose type the machine does not declare with Owns.
// Nothing is written. The handler's state fails with reason
// UndeclaredOutput.
type UndeclaredOutputError struct {
	Machine string
	Kind    schema.GroupKind
}

func (e *UndeclaredOutputError) Error() string {
	return fmt.Sprintf("machine %s does not own %s: declare the type with Owns to apply or delete such children", e.Machine, e.Kind)
}

// OutputLimitError is what [Request.Apply] returns for a child that
// Status.Outputs cannot record within the bounds of its schema, rather
// than write a status that the API server would refuse: the object has
// 256 children already, or the child's group, kind, namespace, name or
// UID is longer than its field holds. Nothing is written, except for a
// UID, which is known once the child is applied. The handler's state
// fails with reason OutputLimit.
type OutputLimitError struct {
	Child OutputRef
	// Field is the field that is full: "outputs" for the number of
	// children, or the field of the child that is too long, such as
	// "name".
	Field string
	// Limit is the field's bound: a number of children, or of bytes.
	Limit int
}

func (e *OutputLimitError) Error() string {
	if e.Field == "outputs" {
		return fmt.Sprintf("applying %s: the object has %d children already, as many as status.outputs records; delete one before applying another", e.Child, e.Limit)
	}
	return fmt.Sprintf("applying %s: its %s is longer than the %d bytes that status.outputs records", e.Child, e.Field, e.Limit)
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

// apply is Request.Apply: it applies child and records it.
func (w *walker[T]) apply(ctx context.Context, child client.Object, opts []ApplyOption) error {
	err := w.applyChild(ctx, child, opts)
	if err != nil && w.outputErr == nil {
		w.outputErr = err
	}
	return err
}

func (w *walker[T]) applyChild(ctx context.Context, child client.Object, opts []ApplyOption) error {
	t, err := w.r.owned(child)
	if err != nil {
		return err
	}
	namespaced, err := w.locate(child, t)
	if err != nil {
		return err
	}
	var o applyOptions
	for _, opt := range opts {
		opt(&o)
	}
	content, err := applyContent(child, t.gvk)
	if err != nil {
		return fmt.Errorf("encoding child %s: %w", child.GetName(), err)
	}
	ref := OutputRef{Group: t.gvk.Group, Kind: t.gvk.Kind, Namespace: content.GetNamespace(), Name: content.GetName()}
	if err := w.fits(ref); err != nil {
		return err
	}
	parent := w.obj
	existing, err := w.r.lookup(ctx, t, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name})
	if err != nil {
		return fmt.Errorf("applying %s: %w", ref, err)
	}
	adopted, err := adopting(parent, t, ref, existing, o.adopt)
	if err != nil {
		return err
	}

	ownable := parent.GetNamespace() == "" || (namespaced && content.GetNamespace() == parent.GetNamespace())
	switch {
	case adopted:
		// No owner reference: garbage collection would delete it.
	case ownable:
		if err := controllerutil.SetControllerReference(parent, content, w.r.client.Scheme()); err != nil {
			return fmt.Errorf("applying %s: %w", ref, err)
		}
	case w.r.b.onDelete == "":
		return fmt.Errorf("applying %s: it cannot carry an owner reference to its parent in namespace %s, so garbage collection will not delete it; declare OnDelete so that the deletion path does", ref, parent.GetNamespace())
	}
	labels := content.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy] = managedBy
	labels[LabelMachine] = w.r.m.name
	labels[LabelOwnerUID] = string(parent.GetUID())
	if w.r.shards != nil {
		labels[LabelSlot] = strconv.Itoa(SlotOf(parent.GetUID()))
	}
	content.SetLabels(labels)
	// Annotations only where they say something: a child with an owner
	// reference needs none to lead back to its parent, and an annotation
	// costs each child a map in every cache that holds it.
	annotations := content.GetAnnotations()
	annotate := func(k, v string) {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[k] = v
	}
	if adopted || !ownable {
		annotate(AnnotationOwner, client.ObjectKeyFromObject(parent).String())
	}
	if w.r.m.mode == Lifecycle {
		annotate(AnnotationState, string(w.req.State))
		ref.State = w.req.State
	}
	if adopted {
		annotate(AnnotationAdopted, "true")
		ref.Adopted = ptr.To(true)
	}
	content.SetAnnotations(annotations)
	body, err := json.Marshal(content)
	if err == nil {
		body, err = applyjson.Trim(body)
	}
	if err != nil {
		return fmt.Errorf("encoding child %s: %w", ref, err)
	}
	digest := applyjson.DigestOf(body)

	key := echo.Key{GroupKind: t.gvk.GroupKind(), NamespacedName: client.ObjectKeyFromObject(content)}
	recorded, _ := w.output(ref)
	if w.r.unchanged(key, existing, digest, recorded) {
		// The child is still what this content made of it: an apply
		// would change nothing.
		if err := copyInto(child, existing.DeepCopyObject().(client.Object), t.gvk); err != nil {
			return fmt.Errorf("applying %s: %w", ref, err)
		}
		return w.recordApplied(ref, recorded, existing, digest.String(), false)
	}

	patchOpts := []client.PatchOption{client.FieldOwner(w.r.m.FieldOwner())}
	if o.force {
		patchOpts = append(patchOpts, client.ForceOwnership)
	}
	answer := t.newObject(w.r.client.Scheme())
	answer.SetNamespace(ref.Namespace)
	answer.SetName(ref.Name)
	w.r.echoes.Begin(key)
	err = w.r.client.Patch(ctx, answer, client.RawPatch(types.ApplyPatchType, body), patchOpts...)
	// The answer's version is the apply's own only if the apply made it.
	// One that changed nothing answers with the version of the last write,
	// which may be someone else's that the cache has yet to see.
	wrote := false
	if err == nil {
		if rv, ok := echo.ResourceVersion(answer); ok {
			w.r.echoes.Applied(key, echo.Apply{Digest: digest, Version: rv})
		}
		wrote = existing == nil || (existing.GetResourceVersion() != answer.GetResourceVersion() && !applyjson.OthersWrote(existing, answer, body))
	}
	var made client.Object
	if wrote {
		made = answer
	}
	if w.r.echoes.Wrote(key, made) {
		w.r.requeue(client.ObjectKeyFromObject(parent))
	}
	if err != nil {
		err = applyFailed(ref, t.gvk, err)
		if ce := (*ConflictError)(nil); !o.force && errors.As(err, &ce) && ce.drift {
			// Only imperative writes stand in the way, such as kubectl
			// edit: that is drift, and a controller puts it right.
			if w.log.Enabled() {
				w.log.Info("taking back fields changed by other writers", "machine", w.r.m.name, "child", ref.String(), "managers", ce.Managers, "fields", ce.Fields)
			}
			return w.applyChild(ctx, child, append(opts, ForceOwnership()))
		}
		return err
	}
	if err := copyInto(child, answer, t.gvk); err != nil {
		return fmt.Errorf("applied %s but cannot read the answer: %w", ref, err)
	}
	return w.recordApplied(ref, recorded, answer, digest.String(), wrote)
}

// recordApplied records ref as obj, the child that an apply of content
// with digest left (wrote says whether it changed it) or found as it
// would leave it. The status keeps the version that kfsm's last apply
// of the content made. An apply that changed nothing leaves the record
// as it was, so that the changes of others to a child (a Deployment's
// status) cost no status write; this process remembers the version it
// saw instead. A version longer than the status holds is not recorded,
// and the next process applies the child again.
func (w *walker[T]) recordApplied(ref, recorded OutputRef, obj client.Object, digest string, wrote bool) error {
	ref.UID, ref.AppliedDigest, ref.ResourceVersion = obj.GetUID(), recorded.AppliedDigest, recorded.ResourceVersion
	if wrote || recorded.AppliedDigest != digest || recorded.UID != ref.UID {
		ref.AppliedDigest, ref.ResourceVersion = digest, obj.GetResourceVersion()
	}
	if len(ref.ResourceVersion) > maxVersion {
		ref.AppliedDigest, ref.ResourceVersion = "", ""
	}
	if err := w.fits(ref); err != nil {
		return err
	}
	w.recordOutput(ref)
	return nil
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

// unchanged reports whether the child that exists is what an apply of
// content with digest made, so that applying it again would change
// nothing: the version that apply left is the version the cache holds.
// A change by anyone else, or another object of the name, has another
// version. This process's memory of its last apply comes first; after a
// restart, the record in the status stands in.
func (r *reconciler[T]) unchanged(key echo.Key, existing client.Object, digest applyjson.Digest, recorded OutputRef) bool {
	if existing == nil || existing.GetDeletionTimestamp() != nil {
		return false
	}
	if last, ok := r.echoes.LastApplied(key); ok {
		rv, _ := echo.ResourceVersion(existing)
		return last.Digest == digest && last.Version == rv
	}
	return recorded.AppliedDigest == digest.String() && recorded.ResourceVersion == existing.GetResourceVersion() && recorded.UID == existing.GetUID()
}

// output returns the record of ref in the status, if there is one.
func (w *walker[T]) output(ref OutputRef) (OutputRef, bool) {
	i, found := slices.BinarySearchFunc(w.st.Outputs, ref, compareRefs)
	if !found {
		return OutputRef{}, false
	}
	return w.st.Outputs[i], true
}

// adopting decides whether an apply may go ahead: an object of the
// child's name (existing, nil if there is none) that kfsm did not create
// for parent is taken over only when the handler asks, and one that
// another parent has, never. It reports whether the child is (or
// becomes) an adopted one, which kfsm never deletes.
func adopting(parent client.Object, t ownedType, ref OutputRef, existing client.Object, asked adoption) (bool, error) {
	if existing == nil {
		return false, nil // created by this apply
	}
	owner := existing.GetLabels()[LabelOwnerUID]
	switch {
	case owner == string(parent.GetUID()):
		// Ours; adopted once, adopted for good, unless the handler now
		// makes it a child like the others.
		return asked != adoptDelete && existing.GetAnnotations()[AnnotationAdopted] == "true", nil
	case owner != "":
		return false, &AlreadyExistsError{Child: ref, Owner: parentName(parent, existing, owner), gvk: t.gvk}
	case asked == refuse:
		return false, &AlreadyExistsError{Child: ref, gvk: t.gvk}
	}
	return asked == adoptKeep, nil
}

// parentName names the parent, of UID uid, of another parent's child:
// by its annotation, or its owner reference, or its UID alone. An owner
// reference names no namespace: the other parent, taken to be of the
// kind of parent, is in the child's namespace or, like parent, in none.
func parentName(parent, child client.Object, uid string) string {
	if owner := child.GetAnnotations()[AnnotationOwner]; owner != "" {
		return owner
	}
	if ref := metav1.GetControllerOf(child); ref != nil && string(ref.UID) == uid {
		ns := child.GetNamespace()
		if parent.GetNamespace() == "" {
			ns = ""
		}
		return client.ObjectKey{Namespace: ns, Name: ref.Name}.String()
	}
	return "uid " + uid
}

// lookup reads a child from the cache, and from the API server when the
// cache does not have it: an object made by hand a moment ago, or one in
// a namespace that the cache does not watch, must not be taken for
// absent. It returns nil for an object that does not exist.
func (r *reconciler[T]) lookup(ctx context.Context, t ownedType, key client.ObjectKey) (client.Object, error) {
	obj := t.newObject(r.client.Scheme())
	if err := r.client.Get(ctx, key, obj, client.UnsafeDisableDeepCopy); err == nil {
		return obj, nil
	}
	obj = t.newObject(r.client.Scheme())
	err := r.reader.Get(ctx, key, obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return obj, nil
}

// applyContent is the child as an apply request will carry it, before
// applyjson.Trim leaves out its status and nulls: a copy of what the author
// set, with the type filled in and the metadata that the server sets
// left out.
func applyContent(child client.Object, gvk schema.GroupVersionKind) (client.Object, error) {
	if _, ok := child.(runtime.Unstructured); ok {
		// A JSON round trip rather than a deep copy, which would panic on
		// content that holds Go ints.
		data, err := json.Marshal(child)
		if err != nil {
			return nil, err
		}
		content := map[string]any{}
		if err := utiljson.Unmarshal(data, &content); err != nil {
			return nil, err
		}
		child = &unstructured.Unstructured{Object: content}
	} else {
		child = child.DeepCopyObject().(client.Object)
	}
	child.SetCreationTimestamp(metav1.Time{})
	child.SetResourceVersion("")
	child.SetUID("")
	child.SetGeneration(0)
	child.SetManagedFields(nil)
	child.SetSelfLink("")
	child.SetDeletionTimestamp(nil)
	child.SetDeletionGracePeriodSeconds(nil)
	child.GetObjectKind().SetGroupVersionKind(gvk)
	return child, nil
}

// copyInto gives the author the child as the server has it: its UID,
// its defaults and its status. src is not used afterwards.
func copyInto(child, src client.Object, gvk schema.GroupVersionKind) error {
	if reflect.TypeOf(child) == reflect.TypeOf(src) {
		reflect.ValueOf(child).Elem().Set(reflect.ValueOf(src).Elem())
		child.GetObjectKind().SetGroupVersionKind(gvk)
		return nil
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
	if err != nil {
		return err
	}
	if cu, ok := child.(*unstructured.Unstructured); ok {
		cu.Object = content
	} else {
		v := reflect.ValueOf(child).Elem()
		v.Set(reflect.Zero(v.Type()))
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, child); err != nil {
			return err
		}
	}
	child.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// managerInConflict reads a conflict cause from the API server. A manager
// that applied is named alone ("conflict with \"team-b\""); one that wrote
// with an update carries the version it used ("conflict with
// \"kubectl-edit\" using v1 at 2026-01-02T03:04:05Z").
var managerInConflict = regexp.MustCompile(`conflict with "([^"]*)"(?: with subresource "[^"]*")?( using .*)?$`)

func applyFailed(ref OutputRef, gvk schema.GroupVersionKind, err error) error {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return fmt.Errorf("applying %s: %w", ref, err)
	}
	ce := &ConflictError{Child: ref, Err: err, drift: true, gvk: gvk}
	for _, c := range status.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		m := managerInConflict.FindStringSubmatch(c.Message)
		if m == nil {
			continue
		}
		if !slices.Contains(ce.Managers, m[1]) {
			ce.Managers = append(ce.Managers, m[1])
		}
		ce.Fields = append(ce.Fields, c.Field)
		ce.drift = ce.drift && m[2] != ""
	}
	if len(ce.Managers) == 0 {
		return fmt.Errorf("applying %s: %w", ref, err)
	}
	return ce
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
	r.echoes.Begin(key)
	err := r.client.Delete(ctx, obj, opts...)
	if apierrors.IsConflict(err) {
		err = r.goneOrNotOurs(ctx, t, ref, err)
	}
	if r.echoes.Deleted(key, ref.UID, err == nil) {
		r.requeue(parent)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
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
	if keys, ok := r.index.children(t.gvk.GroupKind(), uid); ok {
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
		"labels":      map[string]any{LabelManagedBy: nil, LabelMachine: nil, LabelOwnerUID: nil, LabelSlot: nil},
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

// unreachable returns the children of parent that garbage collection
// cannot reach: those that carry no owner reference because they are
// cluster-scoped under a namespaced parent or in another namespace.
// Adopted children are not kfsm's to delete.
func unreachable(parent client.Object, outputs []OutputRef) []OutputRef {
	ns := parent.GetNamespace()
	if ns == "" {
		return nil
	}
	var strays []OutputRef
	for _, ref := range outputs {
		if ref.Namespace != ns && !ptr.Deref(ref.Adopted, false) {
			strays = append(strays, ref)
		}
	}
	return strays
}

// vanished handles an object that is gone. If it went before its deletion
// path was done, because someone removed kfsm's finalizer, the children
// that garbage collection cannot reach would stay for ever: kfsm deletes
// them, as far as this process knew them.
func (r *reconciler[T]) vanished(ctx context.Context, key types.NamespacedName) error {
	r.actions.cancel(key, false)
	strays := r.forget(key)
	if len(strays) == 0 {
		return nil
	}
	if r.shards != nil {
		// A sharded cache holds only this replica's objects: one missing
		// from it may live on in another's slot.
		switch err := r.reader.Get(ctx, key, newObject[T]()); {
		case err == nil:
			return nil
		case !apierrors.IsNotFound(err):
			r.mu.Lock()
			r.strays[key] = strays // ask again
			r.mu.Unlock()
			return err
		}
	}
	var deleted []string
	var errs []error
	for _, ref := range strays {
		t, ok := r.owns[schema.GroupKind{Group: ref.Group, Kind: ref.Kind}]
		if !ok {
			continue
		}
		if err := r.deleteChild(ctx, key, ref, t); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, ref.String())
	}
	if len(deleted) > 0 {
		gone := newObject[T]()
		gone.SetNamespace(key.Namespace)
		gone.SetName(key.Name)
		logf.FromContext(ctx).Info("the object vanished before its deletion path was done, as if its finalizer was removed by hand; deleted the children that garbage collection cannot reach",
			"machine", r.m.name, "object", key.String(), "deleted", deleted)
		r.event(gone, nil, corev1.EventTypeWarning, ReasonOrphansDeleted, "Delete",
			fmt.Sprintf("the object vanished before its deletion path was done; deleted %s", strings.Join(deleted, ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		r.mu.Lock()
		r.strays[key] = strays // try again
		r.mu.Unlock()
		return err
	}
	return nil
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

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
