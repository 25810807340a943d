package fsm

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm/internal/leancache"
	"github.com/kfsm/kfsm/fsm/sharding"
)

// LeanCache makes the cache of the manager that opts will make keep less
// of each object, for an operator with many of them. The cache keeps:
//
//   - no managed fields, the API server's record of which field manager
//     set which field. kfsm never reads them, and on an object whose
//     status kfsm writes they were about 30 % of what the cache held of
//     it, in kfsm's benchmark at 10,000 objects.
//   - one copy of each string that repeats from object to object: label
//     keys, namespaces, the kinds of owner references, the values of
//     kfsm's own labels, and the states, reasons and condition types in
//     kfsm's status.
//   - one map of the labels that the children of one parent share, when
//     their labels are the same: kfsm's own, and those the handler gives
//     them all. A child whose labels differ from its siblings' keeps its
//     own.
//
// The cache also remembers the REST mapping of each kind it reads, which
// a cache of some namespaces looks up on every read, and so does the
// manager's client, which looks one up for each write of metadata alone,
// such as kfsm's status writes.
//
// It also tells kfsm which namespaces the cache watches (its
// DefaultNamespaces, or a kind's own in ByObject): the check of the cache
// against the API server that a leader makes when it begins then lists
// those alone, so that an operator confined to some namespaces by a Role
// in each needs no right to list the others. ([sharding.New] tells it
// too.)
//
// It runs after the transforms that opts's cache options give, wraps the
// NewCache and NewClient that opts gives, and works with [sharding.New]
// called before or after it. Call it before the manager is made:
//
//	fsm.LeanCache(&opts)
//	mgr, err := ctrl.NewManager(cfg, opts)
//
// Caveats: an object read from the cache has no managed fields; read them
// with the manager's API reader. A label map may be held by more than one
// object in the cache: change none read with client.UnsafeDisableDeepCopy
// (controller-runtime forbids that anyway). Writing back an object read from the
// cache is safe: the API server keeps the managed fields of a write that
// sends none. The strings that the cache shares must not be changed
// through unsafe code, as no string may.
func LeanCache(opts *manager.Options) {
	newCache := opts.NewCache
	if newCache == nil {
		newCache = cache.New
	}
	opts.NewCache = func(cfg *rest.Config, co cache.Options) (cache.Cache, error) {
		co.Mapper = leancache.Memo(co.Mapper)
		in := interner{leancache.NewTable(), leancache.NewSiblings()}
		c, err := newCache(cfg, leancache.After(co, in.lean))
		return leancache.Scoped(c, co), err
	}
	newClient := opts.NewClient
	if newClient == nil {
		newClient = client.New
	}
	opts.NewClient = func(cfg *rest.Config, co client.Options) (client.Client, error) {
		co.Mapper = leancache.Memo(co.Mapper)
		return newClient(cfg, co)
	}
}

// noteFatCache says once, at info, that the cache keeps the managed fields
// that LeanCache drops: what that costs must not go unseen.
func (r *reconciler[T]) noteFatCache(ctx context.Context, obj T) {
	if r.fatCache.Load() || len(obj.GetManagedFields()) == 0 || !r.managed() || !r.fatCache.CompareAndSwap(false, true) {
		return
	}
	logf.FromContext(ctx).Info("the manager's cache keeps every object's managed fields, which kfsm never reads; call fsm.LeanCache(&opts) before ctrl.NewManager to drop them and save memory and CPU",
		"machine", r.m.name, "kind", r.gvk.Kind)
}

// interner keeps one copy of each string, and of each children's label
// map, that a cache shares.
type interner struct {
	*leancache.Table
	siblings *leancache.Siblings
}

// repeats says whether the values of a label repeat from object to
// object: those of kfsm's labels other than an owner's UID.
func repeats(label string) bool {
	return label == LabelManagedBy || label == LabelMachine || label == sharding.LabelSlot
}

// lean drops obj's managed fields and shares its repeating strings. It
// may run more than once on an object.
func (in interner) lean(obj any) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return // a tombstone of a deleted object
	}
	o.SetManagedFields(nil)
	if _, ok := obj.(runtime.Unstructured); ok {
		return // its getters return copies, and it holds its values as any
	}
	if ns, ok := in.Copy(o.GetNamespace()); ok {
		o.SetNamespace(ns)
	}
	labels := o.GetLabels()
	owner := labels[LabelOwnerUID]
	if shared := in.siblings.Find(owner, labels); shared != nil {
		o.SetLabels(shared)
	} else {
		for k, v := range labels {
			sk, newKey := in.Copy(k)
			newValue := false
			if repeats(k) {
				v, newValue = in.Copy(v)
			}
			// Assigning to a key that is there keeps the map's size; Go
			// stores the key given, so the map then holds the shared copy.
			// A map made lean before, which siblings may share, is left
			// unchanged.
			if newKey || newValue {
				labels[sk] = v
			}
		}
		in.siblings.Keep(owner, labels)
	}
	refs := o.GetOwnerReferences()
	for i := range refs {
		refs[i].APIVersion = in.Share(refs[i].APIVersion)
		refs[i].Kind = in.Share(refs[i].Kind)
	}
	if f, ok := obj.(interface{ FSMStatus() *Status }); ok {
		if s := f.FSMStatus(); s != nil {
			in.leanStatus(s)
		}
	}
}

func (in interner) leanStatus(s *Status) {
	// A decoder grows a list by doubling it: a history of ten transitions
	// holds room for seventeen, which the cache would keep as long as the
	// object.
	s.Conditions, s.History, s.Outputs, s.Actions = fit(s.Conditions), fit(s.History), fit(s.Outputs), fit(s.Actions)
	state := func(s State) State { return State(in.Share(string(s))) }
	s.State = state(s.State)
	for i := range s.Conditions {
		c := &s.Conditions[i]
		c.Type, c.Status, c.Reason = in.Share(c.Type), metav1.ConditionStatus(in.Share(string(c.Status))), in.Share(c.Reason)
	}
	for i := range s.History {
		t := &s.History[i]
		t.From, t.To, t.Reason = state(t.From), state(t.To), in.Share(t.Reason)
	}
	for i := range s.Outputs {
		o := &s.Outputs[i]
		o.Group, o.Kind, o.Namespace, o.State = in.Share(o.Group), in.Share(o.Kind), in.Share(o.Namespace), state(o.State)
	}
}

// fit returns list with no more room than its entries need: list itself,
// or a copy.
func fit[S ~[]E, E any](list S) S {
	if cap(list) > len(list) && len(list) > 0 {
		list = append(S(nil), list...)
	}
	return list
}
