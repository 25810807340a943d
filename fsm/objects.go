package fsm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
	delete(r.newerTold, key)
	delete(r.queued, key)
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

// handedOver reports whether the cache was checked against the API server
// since this replica took slot at epoch (see Gained): until then, the
// replica that held the slot may have written an object a moment ago that
// the cache has not seen. If not, the object waits for the check, parked
// (the next check of any slot queues it again).
//
// Of an object that a check queued, one reconcile does the work: a second
// one, which the check's add made while the first ran, would run again at
// once, on the version the first wrote. A reconcile that began before the
// check leaves the work to the one the check queued; of those that begin
// after it, the first does it, and the next one only if something was
// added to the queue for the object after the first began.
func (r *reconciler[T]) handedOver(key types.NamespacedName, slot int, epoch uint64, b begun) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checked[slot] < epoch {
		r.parked[key] = struct{}{}
		return false
	}
	q, ok := r.queued[key]
	switch {
	case !ok:
		return true
	case b.checks < q.by:
		return false
	case q.ran:
		delete(r.queued, key)
		_, counted := r.queue.(*countingQueue)
		return !counted || b.adds != q.covered
	}
	q.ran, q.covered = true, b.adds
	r.queued[key] = q
	return true
}

// checkQueued is what the reconciler knows of an object that a check
// queued: the count of that check, of the adds of the object to the
// queue since, and whether a reconcile begun after the check ran, with
// the count of adds when it began.
type checkQueued struct {
	by, adds uint64
	ran      bool
	covered  uint64
}

// begun is what a reconcile of a sharded machine's object notes as it
// begins: the count of checks done, and of the adds of the object since
// the check that queued it.
type begun struct{ checks, adds uint64 }

// begin notes the start of a reconcile of key.
func (r *reconciler[T]) begin(key types.NamespacedName) begun {
	if r.shards == nil {
		return begun{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return begun{checks: r.checks, adds: r.queued[key].adds}
}

// added notes an add of key to the controller's queue (see countingQueue):
// news for an object that a check queued.
func (r *reconciler[T]) added(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q, ok := r.queued[key]; ok {
		q.adds++
		r.queued[key] = q
	}
}

// catchUp runs once this process leads: each object whose cached copy is
// older than the API server's, as the leader before may have left it,
// waits in the stale-cache guard until the cache has caught up.
func (r *reconciler[T]) catchUp(ctx context.Context) error {
	defer close(r.caughtUp)
	if _, err := r.behind(ctx, nil); err != nil {
		logf.FromContext(ctx).Error(err, "listing the objects from the API server on becoming leader failed; reconciling from the cache as it is "+
			"(of a manager whose cache watches some namespaces alone, kfsm lists those when the manager is made with fsm.LeanCache)", "machine", r.m.name)
	}
	return nil
}

// behind lists the objects that of selects (all if nil) from the API
// server, by their metadata and with opts, and has the stale-cache guard
// hold back those whose cached copy is older; it logs how many, and
// returns the keys of those listed that the cache holds or lacks. It
// lists the namespaces that the manager's cache watches, when the cache
// says which (see leancache.Scoped), so that an operator confined to them
// needs no right to list the others; else every namespace, and the
// objects of one that the cache does not watch (a read of them fails)
// are not this process's.
func (r *reconciler[T]) behind(ctx context.Context, of func(metav1.Object) bool, opts ...client.ListOption) ([]types.NamespacedName, error) {
	list := r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List")
	var keys []types.NamespacedName
	n, err := r.echoes.CatchUp(ctx, r.reader, r.gk, list, r.watched, of, func(key types.NamespacedName) (uint64, bool) {
		obj := newObject[T]()
		switch err := r.client.Get(ctx, key, obj); {
		case apierrors.IsNotFound(err):
			keys = append(keys, key)
			return 0, false
		case err != nil:
			return math.MaxUint64, true // never behind
		}
		keys = append(keys, key)
		return echo.ResourceVersion(obj)
	}, opts...)
	if n > 0 {
		logf.FromContext(ctx).Info("the cache is behind the API server; those objects wait until it catches up", "machine", r.m.name, "objects", n)
	}
	return keys, err
}

// Gained checks the cache against the API server for the objects of the
// slots that this replica took, with one list of their metadata (paged),
// not a read of each: the replica that held a slot may have written its
// objects a moment before it let the slot go, and the cache may not have
// seen that yet. Those behind wait in the stale-cache guard; reconciles of
// the slots wait for the check (see handedOver). Then it queues the
// objects listed and those parked, each once: an object queued again
// while a worker runs it runs again at once, on the version it just
// wrote.
func (r *reconciler[T]) Gained(ctx context.Context, won shard.Slots) {
	epochs := r.shards.Epochs()
	versions := map[types.NamespacedName]string{}
	ours := func(o metav1.Object) bool {
		if !won.Has(shard.SlotOf(o.GetUID())) {
			return false
		}
		versions[types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}] = o.GetResourceVersion()
		return true
	}
	var listed []types.NamespacedName
	if wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		clear(versions)
		listed, err = r.behind(ctx, ours, won.Listing())
		if err != nil && ctx.Err() == nil {
			logf.FromContext(ctx).Error(err, "listing the objects of slots taken from the API server; asking again in a second", "machine", r.m.name)
		}
		return err == nil, nil
	}) != nil {
		return // stopped
	}
	// The queue takes them under the lock, so that a reconcile that
	// begins after the check finds each of them in queued (see
	// handedOver), and no add counted before the check's own.
	r.mu.Lock()
	defer r.mu.Unlock()
	for slot := range won.Each() {
		r.checked[slot] = max(r.checked[slot], epochs[slot])
	}
	r.checks++
	for _, key := range listed {
		// The reconcile queued reads this version or a later one: an event
		// of it, as the cache catches up, is no news (see echo.Marks.Read).
		listedAt := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: versions[key]}}
		r.echoes.Read(echo.Key{GroupKind: r.gk, NamespacedName: key}, listedAt)
		r.parked[key] = struct{}{}
	}
	for key := range r.parked {
		r.queued[key] = checkQueued{by: r.checks}
		req := reconcile.Request{NamespacedName: key}
		switch q := r.queue.(type) {
		case *countingQueue: // the check's own add is no news to added
			q.PriorityQueue.Add(req)
		case nil:
		default:
			q.Add(req)
		}
	}
	clear(r.parked)
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
