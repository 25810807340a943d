package fsm

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm/internal/echo"
	"github.com/kfsm/kfsm/fsm/internal/shard"
	"github.com/kfsm/kfsm/fsm/sharding"
)

// tracked is what the gauges count for one object, and its hash slot. It
// keeps the slot rather than the UID it comes from, which would hold on
// to a string of a copy of the object that the cache has since replaced.
type tracked struct {
	state                State
	slot                 uint8
	stalled, reconciling bool
}

// tracked.slot holds every slot: this does not compile if it cannot.
const _ = uint8(shard.NumSlots - 1)

// track keeps the objects and stalled gauges in step with obj's status,
// remembers the children that garbage collection cannot reach, for an
// object that vanishes before its deletion path is done, and tells the
// echo marks which applies the status records; it runs once obj's status
// is written.
func (r *reconciler[T]) track(obj T) {
	r.recorded(obj)
	key := client.ObjectKeyFromObject(obj)
	st := obj.FSMStatus()
	now := tracked{
		slot:        uint8(shard.SlotOf(obj.GetUID())),
		state:       st.State,
		stalled:     meta.IsStatusConditionTrue(st.Conditions, ConditionStalled),
		reconciling: meta.IsStatusConditionTrue(st.Conditions, ConditionReconciling),
	}
	strays := unreachable(obj, st.Outputs)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case len(strays) > 0:
		r.strays[key] = strays
	case len(r.strays) > 0:
		delete(r.strays, key)
	}
	was, known := r.tracked[key]
	if known && was == now {
		return
	}
	r.tracked[key] = now
	if known {
		r.b.metrics.Count(string(was.state), was.stalled, was.reconciling, -1)
	}
	r.b.metrics.Count(string(now.state), now.stalled, now.reconciling, 1)
}

// recorded tells the echo marks which applies of obj's children its
// status, as written, records: the marks need not remember them.
func (r *reconciler[T]) recorded(obj T) {
	for _, o := range obj.FSMStatus().Outputs {
		if o.AppliedDigest != "" {
			key := echo.Key{GroupKind: schema.GroupKind{Group: o.Group, Kind: o.Kind}, NamespacedName: types.NamespacedName{Namespace: o.Namespace, Name: o.Name}}
			r.echoes.Recorded(key, o.AppliedDigest, o.ResourceVersion)
		}
	}
}

// forget drops what the reconciler knows of an object, and returns the
// children that garbage collection cannot reach.
func (r *reconciler[T]) forget(key types.NamespacedName) []OutputRef {
	r.echoes.Forget(echo.Key{GroupKind: r.gk, NamespacedName: key})
	return r.untrack(key)
}

// untrack drops what the gauges and the orphan cleanup keep of an object,
// and returns its strays.
func (r *reconciler[T]) untrack(key types.NamespacedName) []OutputRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	strays := r.strays[key]
	delete(r.strays, key)
	delete(r.handed, key)
	delete(r.newerTold, key)
	was, known := r.tracked[key]
	if !known {
		return strays
	}
	delete(r.tracked, key)
	r.b.metrics.Count(string(was.state), was.stalled, was.reconciling, -1)
	return strays
}

// shard registers a sharded machine's reconciler with its Shards.
func (r *reconciler[T]) shard(mgr manager.Manager, s *sharding.Shards) error {
	replica := shard.ReplicaOf(s)
	mapping, err := mgr.GetRESTMapper().RESTMapping(r.gk, r.gvk.Version)
	if err != nil {
		return err
	}
	resources := []*shard.Resource{shard.NewResource(r.gvk, mapping.Resource.Resource, false)}
	for _, t := range r.owns {
		m, err := mgr.GetRESTMapper().RESTMapping(t.gvk.GroupKind(), t.gvk.Version)
		if err != nil {
			return err
		}
		resources = append(resources, shard.NewResource(t.gvk, m.Resource.Resource, true))
	}
	if err := replica.Join(mgr, r.m.name, r.b.plan.Version(), resources, r); err != nil {
		return err
	}
	r.shards = replica
	return nil
}

// handedOver makes sure, on the first reconcile of obj since this replica
// took its slot, that the cache is not behind the API server: the replica
// that held the slot may have written the object a moment ago. The
// stale-cache guard then waits until the cache has caught up.
func (r *reconciler[T]) handedOver(ctx context.Context, obj T, epoch uint64) error {
	key := client.ObjectKeyFromObject(obj)
	r.mu.Lock()
	checked := r.handed[key] == epoch
	r.mu.Unlock()
	if checked {
		return nil
	}
	server := newObject[T]()
	if err := r.reader.Get(ctx, key, server); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the cache will tell
		}
		return err
	}
	if rv, ok := echo.ResourceVersion(server); ok {
		r.echoes.AtLeast(echo.Key{GroupKind: r.gk, NamespacedName: key}, rv)
	}
	r.mu.Lock()
	r.handed[key] = epoch
	r.mu.Unlock()
	return nil
}

// catchUp runs once this process leads: each object whose cached copy is
// older than the API server's, as the leader before may have left it,
// waits in the stale-cache guard until the cache has caught up.
func (r *reconciler[T]) catchUp(ctx context.Context) error {
	defer close(r.caughtUp)
	list := r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List")
	behind, err := r.echoes.CatchUp(ctx, r.reader, r.gk, list, func(key types.NamespacedName) (uint64, bool) {
		obj := newObject[T]()
		if r.client.Get(ctx, key, obj) != nil {
			return 0, false
		}
		return echo.ResourceVersion(obj)
	})
	log := logf.FromContext(ctx).WithValues("machine", r.m.name)
	if err != nil {
		log.Error(err, "listing the objects from the API server on becoming leader failed; reconciling from the cache as it is")
	} else if behind > 0 {
		log.Info("the cache is behind the API server; those objects wait until it catches up", "objects", behind)
	}
	return nil
}

// Gained queues the cached objects in the slots that this replica took.
func (r *reconciler[T]) Gained(ctx context.Context, won shard.Slots) {
	obj, err := r.client.Scheme().New(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err != nil {
		logf.FromContext(ctx).Error(err, "listing the objects of slots taken", "machine", r.m.name)
		return
	}
	list := obj.(client.ObjectList)
	if err := r.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		if ctx.Err() == nil {
			logf.FromContext(ctx).Error(err, "listing the objects of slots taken", "machine", r.m.name)
		}
		return
	}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if obj := o.(client.Object); won.Has(shard.SlotOf(obj.GetUID())) {
			r.requeue(client.ObjectKeyFromObject(obj))
		}
		return nil
	})
}

// Released forgets the objects of the slots this replica gives up, and
// cancels their actions.
func (r *reconciler[T]) Released(lost shard.Slots) map[int][]<-chan struct{} {
	var keys []types.NamespacedName
	r.mu.Lock()
	for key, t := range r.tracked {
		if lost.Has(int(t.slot)) {
			keys = append(keys, key)
		}
	}
	r.mu.Unlock()
	for _, key := range keys {
		r.forget(key)
	}
	return r.actions.CancelSlots(func(uid types.UID) (int, bool) {
		slot := shard.SlotOf(uid)
		return slot, lost.Has(slot)
	})
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
	r.actions.Cancel(key, false)
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
