package fsm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kfsm/kfsm/fsm/internal/echo"
	"github.com/kfsm/kfsm/fsm/internal/shard"
	"github.com/kfsm/kfsm/fsm/internal/wire"
	"github.com/kfsm/kfsm/fsm/sharding"
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

// ForceOwnership takes over the fields that another field manager owns
// instead of failing with a [ConflictError]: the equivalent of kubectl
// apply --server-side --force-conflicts. Use it when kfsm's machine is
// meant to win over whoever else writes the child.
func ForceOwnership() ApplyOption { return func(o *applyOptions) { o.force = true } }

// apply is Request.Apply: it applies child and records it.
func (w *walker[T]) apply(ctx context.Context, child client.Object, opts []ApplyOption) error {
	err := w.applyChild(ctx, child, opts)
	if err != nil && w.outputErr == nil {
		w.outputErr = err
	}
	return err
}

// desiredChild is a child as an apply request carries it, and what kfsm
// knows of the object of its name.
type desiredChild struct {
	t        ownedType
	ref      OutputRef // the child's record, as the status will keep it
	key      echo.Key
	content  client.Object // the child as kfsm applies it (see wire.Content)
	typed    bool          // content is of a Go type, not unstructured
	body     []byte        // the apply request, made by applyBody when first needed
	digest   wire.Digest
	existing client.Object // the object of the child's name, nil if none
	recorded OutputRef     // the status's record of the child, if any
	create   bool          // unknown to the status (and, if adopting, to the cache): created, not read first
}

// applyChild sends the apply that desired builds of child, unless the
// child is already what it would make of it, and records the child.
func (w *walker[T]) applyChild(ctx context.Context, child client.Object, opts []ApplyOption) error {
	var o applyOptions
	for _, opt := range opts {
		opt(&o)
	}
	d, err := w.desired(ctx, child, o.adopt, true)
	if err != nil {
		return err
	}
	var answer client.Object
	if d.create {
		answer, err = w.r.create(ctx, client.ObjectKeyFromObject(w.obj), d)
		if apierrors.IsAlreadyExists(err) {
			// One the cache has yet to see: read it, decide as for any.
			d, err = w.desired(ctx, child, o.adopt, false)
		}
		if err != nil {
			return err
		}
	}
	wrote := answer != nil
	switch {
	case wrote:
	case w.r.unchanged(d.key, d.existing, d.digest, d.recorded):
		// The child is still what this content made of it: an apply
		// would change nothing.
		answer = d.existing.DeepCopyObject().(client.Object)
	default:
		answer, wrote, err = w.r.send(ctx, client.ObjectKeyFromObject(w.obj), d, o.force)
		if ce := (*ConflictError)(nil); !o.force && errors.As(err, &ce) && ce.drift {
			// Only imperative writes stand in the way, such as kubectl
			// edit: that is drift, and a controller puts it right.
			if w.log.Enabled() {
				w.log.Info("taking back fields changed by other writers", "machine", w.r.m.name, "child", d.ref.String(), "managers", ce.Managers, "fields", ce.Fields)
			}
			return w.applyChild(ctx, child, append(opts, ForceOwnership()))
		}
		if err != nil {
			return err
		}
	}
	if err := wire.CopyInto(child, answer, d.t.gvk); err != nil {
		return fmt.Errorf("applied %s but cannot read the answer: %w", d.ref, err)
	}
	return w.recordApplied(d.ref, d.recorded, answer, d.digest.String(), wrote)
}

// desired builds the apply request of child, with the owner reference,
// the labels and the annotations that kfsm sets, and reads the object of
// its name: one that kfsm did not create for the parent is taken over
// only as adopt says; with mayCreate, an unknown one is to be created.
func (w *walker[T]) desired(ctx context.Context, child client.Object, adopt adoption, mayCreate bool) (*desiredChild, error) {
	t, err := w.r.owned(child)
	if err != nil {
		return nil, err
	}
	namespaced, err := w.locate(child, t)
	if err != nil {
		return nil, err
	}
	content, err := wire.Content(child, t.gvk)
	if err != nil {
		return nil, fmt.Errorf("encoding child %s: %w", child.GetName(), err)
	}
	d := &desiredChild{t: t, ref: OutputRef{Group: t.gvk.Group, Kind: t.gvk.Kind, Namespace: content.GetNamespace(), Name: content.GetName()}}
	if err := w.fits(d.ref); err != nil {
		return nil, err
	}
	parent := w.obj
	d.recorded, _ = w.output(d.ref)
	mayCreate = mayCreate && d.recorded.UID == ""
	if mayCreate && adopt == refuse {
		// Nothing of the name is to be taken over: the create, which
		// fails if an object of the name exists, needs no read first
		// (applyChild reads on that failure).
		d.create = true
	} else if d.existing, d.create, err = w.r.lookup(ctx, t, client.ObjectKey{Namespace: d.ref.Namespace, Name: d.ref.Name}, mayCreate); err != nil {
		return nil, fmt.Errorf("applying %s: %w", d.ref, err)
	}
	adopted, err := adopting(parent, t, d.ref, d.existing, adopt)
	if err != nil {
		return nil, err
	}
	ownable := parent.GetNamespace() == "" || (namespaced && content.GetNamespace() == parent.GetNamespace())
	switch {
	case adopted:
		// No owner reference: garbage collection would delete it.
	case ownable:
		if err := controllerutil.SetControllerReference(parent, content, w.r.client.Scheme()); err != nil {
			return nil, fmt.Errorf("applying %s: %w", d.ref, err)
		}
	case w.r.b.onDelete == "":
		return nil, fmt.Errorf("applying %s: it cannot carry an owner reference to its parent in namespace %s, so garbage collection will not delete it; declare OnDelete so that the deletion path does", d.ref, parent.GetNamespace())
	}
	w.mark(content, &d.ref, adopted, ownable)
	_, u := content.(runtime.Unstructured)
	d.typed, d.content, d.key = !u && !t.unstructured, content, echo.Key{GroupKind: t.gvk.GroupKind(), NamespacedName: client.ObjectKeyFromObject(content)}
	if d.digest, d.body, err = wire.DigestOfContent(content, t.gvk); err != nil {
		return nil, fmt.Errorf("encoding child %s: %w", d.ref, err)
	}
	return d, nil
}

// applyBody is the body of d's apply request, encoded when first needed:
// a child of a kind with a protobuf encoding is digested without it, and
// a child that needs no write is never encoded.
func (d *desiredChild) applyBody() (body []byte, err error) {
	if d.body == nil {
		d.body, err = wire.Body(d.content)
	}
	return d.body, err
}

// mark puts kfsm's labels on content, and the annotations that say what
// its owner reference does not, and records in ref the state whose
// handler applies it and whether it is adopted.
func (w *walker[T]) mark(content client.Object, ref *OutputRef, adopted, ownable bool) {
	parent := w.obj
	labels := content.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy] = managedBy
	labels[LabelMachine] = w.r.m.name
	labels[LabelOwnerUID] = string(parent.GetUID())
	if w.r.shards != nil {
		labels[sharding.LabelSlot] = strconv.Itoa(shard.SlotOf(parent.GetUID()))
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
}

// send applies d, a child of parent, marking the write for the echo
// filter; wrote says whether the apply changed the child. The answer's
// version is the apply's own only if the apply made it. One that changed
// nothing answers with the version of the last write, which may be
// someone else's that the cache has yet to see.
func (r *reconciler[T]) send(ctx context.Context, parent types.NamespacedName, d *desiredChild, force bool) (answer client.Object, wrote bool, err error) {
	body, err := d.applyBody()
	if err != nil {
		return nil, false, fmt.Errorf("encoding child %s: %w", d.ref, err)
	}
	patchOpts := []client.PatchOption{client.FieldOwner(r.m.FieldOwner())}
	if force {
		patchOpts = append(patchOpts, client.ForceOwnership)
	}
	answer = d.t.newObject(r.client.Scheme())
	answer.SetNamespace(d.ref.Namespace)
	answer.SetName(d.ref.Name)
	r.echoes.Begin(d.key, d.existing)
	made := func(obj client.Object) { r.echoes.Made(d.key, obj) }
	err = wire.Apply(ctx, r.client, answer, body, r.m.FieldOwner(), r.echoes.Created(d.key, d.existing), made, patchOpts...)
	if err == nil {
		if rv, ok := echo.ResourceVersion(answer); ok {
			r.echoes.Applied(d.key, echo.Apply{Digest: d.digest, Version: rv}, false)
		}
		wrote = d.existing == nil || (d.existing.GetResourceVersion() != answer.GetResourceVersion() && !wire.OthersWrote(d.existing, answer, body))
	}
	var result client.Object
	if wrote {
		result = answer
	}
	if r.echoes.Wrote(d.key, result) {
		r.requeue(parent)
	}
	if err != nil {
		return nil, false, applyFailed(d.ref, d.t.gvk, err)
	}
	return answer, wrote, nil
}

// create sends d as a create request, which fails with AlreadyExists if
// an object of the name exists, marking the write for the echo filter.
func (r *reconciler[T]) create(ctx context.Context, parent types.NamespacedName, d *desiredChild) (client.Object, error) {
	obj, err := d.createObject(r.client.Scheme())
	if err != nil {
		return nil, fmt.Errorf("decoding the content of %s: %w", d.ref, err)
	}
	r.echoes.Begin(d.key, nil)
	err = r.client.Create(ctx, obj, client.FieldOwner(r.m.FieldOwner()))
	var made client.Object
	if err == nil {
		made = obj
		if rv, ok := echo.ResourceVersion(obj); ok {
			r.echoes.Applied(d.key, echo.Apply{Digest: d.digest, Version: rv}, true)
		}
	}
	if r.echoes.Wrote(d.key, made) {
		r.requeue(parent)
	}
	if err != nil {
		return nil, applyFailed(d.ref, d.t.gvk, err)
	}
	return made, nil
}

// createObject is the object that a create of d sends: what its apply
// body decodes to. Typed content, its status cleared, is that already
// (nothing that Body leaves out decodes to other than the zero value), and
// it is used as it is.
func (d *desiredChild) createObject(scheme *runtime.Scheme) (client.Object, error) {
	if d.typed {
		return d.content, nil
	}
	body, err := d.applyBody()
	obj := d.t.newObject(scheme)
	if err == nil {
		err = json.Unmarshal(body, obj)
	}
	return obj, err
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

// unchanged reports whether the child that exists is what an apply of
// content with digest made, so that applying it again would change
// nothing: the version that apply left is the version the cache holds.
// A change by anyone else, or another object of the name, has another
// version. This process's memory of its last apply comes first; after a
// restart, the record in the status stands in.
func (r *reconciler[T]) unchanged(key echo.Key, existing client.Object, digest wire.Digest, recorded OutputRef) bool {
	if existing == nil || existing.GetDeletionTimestamp() != nil {
		return false
	}
	if last, ok := r.echoes.LastApplied(key); ok {
		rv, _ := echo.ResourceVersion(existing)
		return last.Digest == digest && last.Version == rv
	}
	return recorded.AppliedDigest == digest.String() && recorded.ResourceVersion == existing.GetResourceVersion() && recorded.UID == existing.GetUID()
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
// absent. It returns nil for an object that does not exist. With
// mayCreate, one that the cache watches and lacks is to be created.
func (r *reconciler[T]) lookup(ctx context.Context, t ownedType, key client.ObjectKey, mayCreate bool) (obj client.Object, create bool, err error) {
	obj = t.newObject(r.client.Scheme())
	err = r.client.Get(ctx, key, obj, client.UnsafeDisableDeepCopy)
	switch {
	case err == nil:
		return obj, false, nil
	case mayCreate && apierrors.IsNotFound(err):
		return nil, true, nil
	}
	if err = r.reader.Get(ctx, key, obj); apierrors.IsNotFound(err) { // obj as it was: the cache's failed Get left it
		return nil, false, nil
	}
	return obj, false, err
}
