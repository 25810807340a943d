package fsm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/shard"
)

// TestAReconcileBeforeTheCatchUpWaitsForIt starts a reconcile while a new
// leader's catch-up is still listing the objects: it must wait for the
// catch-up and then do its work, once. Requeued instead, every object of
// the cache's first list came back for a second reconcile as soon as the
// workers outran the list (at 10,000 objects, all of them did).
func TestAReconcileBeforeTheCatchUpWaitsForIt(t *testing.T) {
	c, r := readyReconciler(t)
	r.caughtUp = make(chan struct{}) // a leader's catch-up under way
	ctx := logr.NewContext(t.Context(), logr.Discard())

	type answer struct {
		after time.Duration
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := r.Reconcile(ctx, benchRequest)
		done <- answer{res.RequeueAfter, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("the reconcile returned before the catch-up ended (requeue after %s, error %v), to come back for the same object", a.after, a.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(r.caughtUp)
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	var o benchObject
	if err := c.Client.Get(ctx, benchRequest.NamespacedName, &o); err != nil {
		t.Fatal(err)
	}
	if o.Status.State != "Ready" {
		t.Fatalf("after the catch-up, the reconcile left the object in state %q, want Ready", o.Status.State)
	}

	// A manager that stops meanwhile ends the wait.
	r.caughtUp = make(chan struct{})
	stopped, stop := context.WithCancel(ctx)
	stop()
	go func() {
		res, err := r.Reconcile(stopped, benchRequest)
		done <- answer{res.RequeueAfter, err}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a reconcile waiting for the catch-up did not end with its context")
	}
}

// addCounter is a queue that counts what is added to it.
type addCounter struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	mu    sync.Mutex
	added map[types.NamespacedName]int
}

func (q *addCounter) Add(req reconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.added[req.NamespacedName]++
}

// TestGainedQueuesEachObjectOnce takes the slot of an object that a
// reconcile parked before the replica's cache was checked: the check
// lists it too, and it must be queued once. Queued twice, the second
// add came while a worker ran the first, and the object ran again at
// once: its handler ran twice to completion on one generation in a
// hand-over. An object that the API server lists but the cache cannot
// hold (of a namespace the manager does not watch) is neither queued,
// where its reconcile would fail for ever, nor counted behind.
func TestGainedQueuesEachObjectOnce(t *testing.T) {
	c, r := readyReconciler(t)
	ctx := logr.NewContext(t.Context(), logr.Discard())
	outside := &benchObject{ObjectMeta: metav1.ObjectMeta{Name: "o", Namespace: "unwatched"}}
	if err := c.Client.Create(ctx, outside); err != nil {
		t.Fatal(err)
	}
	c.unwatched = "unwatched"
	replica, err := shard.NewReplica(&rest.Config{Host: "127.0.0.1:1"}, &manager.Options{}, shard.Options{Name: "gained", Namespace: "ns", Identity: "r"})
	if err != nil {
		t.Fatal(err)
	}
	r.shards = replica
	r.reader = metadataLister{c.Client}
	q := &addCounter{added: map[types.NamespacedName]int{}}
	r.queue = q

	var o benchObject
	if err := c.Client.Get(ctx, benchRequest.NamespacedName, &o); err != nil {
		t.Fatal(err)
	}
	slot := shard.SlotOf(o.UID)
	if r.handedOver(benchRequest.NamespacedName, slot, 1, begun{}) {
		t.Fatal("a slot taken and not checked counts as handed over")
	}
	var all shard.Slots = 1<<shard.NumSlots - 1
	before := r.begin(benchRequest.NamespacedName) // a reconcile that began before the check
	if _, err := r.behind(ctx, nil, all.Listing()); err != nil {
		t.Fatal(err) // Gained would ask again every second
	}
	r.Gained(ctx, all)

	if n := q.added[benchRequest.NamespacedName]; n != 1 {
		t.Errorf("Gained queued ns/o %d times, want once: it was parked and is listed", n)
	}
	if n := q.added[client.ObjectKeyFromObject(outside)]; n != 0 {
		t.Errorf("Gained queued unwatched/o, which the cache cannot hold, %d times", n)
	}

	// An event of the version listed, which the cache may still be
	// taking in, is no news: the reconcile queued reads it or a later one.
	filter := r.echoes.Filter(r.roleOf, func(schema.GroupKind, client.Object) {})
	was := o.DeepCopyObject().(*benchObject)
	was.ResourceVersion = "1"
	if filter.Update(event.UpdateEvent{ObjectOld: was, ObjectNew: &o}) {
		t.Errorf("the event of version %s of ns/o, which Gained listed and queued, passed", o.ResourceVersion)
	}
	newer := o.DeepCopyObject().(*benchObject)
	newer.ResourceVersion = "1" + o.ResourceVersion
	if !filter.Update(event.UpdateEvent{ObjectOld: &o, ObjectNew: newer}) {
		t.Errorf("the event of version %s of ns/o, newer than the one listed, was dropped", newer.ResourceVersion)
	}

	// A reconcile of ns/o that began before the check leaves the work to
	// the one that the check queued, once.
	if r.handedOver(benchRequest.NamespacedName, slot, 0, before) {
		t.Error("a reconcile that began before the check did the work of the one it queued")
	}
	if !r.handedOver(benchRequest.NamespacedName, slot, 0, r.begin(benchRequest.NamespacedName)) {
		t.Error("the reconcile that the check queued was held back")
	}
	if !r.handedOver(benchRequest.NamespacedName, slot, 0, r.begin(benchRequest.NamespacedName)) {
		t.Error("a reconcile was held back after the one that the check queued ran")
	}
}

// TestAReconcileTakenBeforeTheCheckRunsOnce has a worker take an object
// from the controller's queue, where an event put it, just before the
// check of its slot, and begin to reconcile it just after: the check's
// add came while the worker held the object, and the queue hands it out
// again once the worker is done. The first reconcile does the work, the
// second not: it would run the handler again at once, on the version the
// first wrote. Had something else been added for the object after the
// first began, the second runs.
func TestAReconcileTakenBeforeTheCheckRunsOnce(t *testing.T) {
	c, r := readyReconciler(t)
	ctx := logr.NewContext(t.Context(), logr.Discard())
	replica, err := shard.NewReplica(&rest.Config{Host: "127.0.0.1:1"}, &manager.Options{}, shard.Options{Name: "taken", Namespace: "ns", Identity: "r"})
	if err != nil {
		t.Fatal(err)
	}
	r.shards = replica
	r.reader = metadataLister{c.Client}
	q := &countingQueue{PriorityQueue: priorityqueue.New[reconcile.Request]("taken"), added: r.added}
	t.Cleanup(q.ShutDown)
	r.queue = q
	get := func(what string) reconcile.Request {
		t.Helper()
		got := make(chan reconcile.Request, 1)
		go func() {
			req, _ := q.Get()
			got <- req
		}()
		select {
		case req := <-got:
			return req
		case <-time.After(5 * time.Second):
			t.Fatalf("the queue did not hand out %s", what)
			return reconcile.Request{}
		}
	}
	var o benchObject
	if err := c.Client.Get(ctx, benchRequest.NamespacedName, &o); err != nil {
		t.Fatal(err)
	}
	key, slot := benchRequest.NamespacedName, shard.SlotOf(o.UID)
	var all shard.Slots = 1<<shard.NumSlots - 1

	for _, news := range []bool{false, true} {
		q.Add(benchRequest) // an event
		first := get("the object an event queued")
		r.Gained(ctx, all)
		if !r.handedOver(key, slot, 0, r.begin(key)) {
			t.Fatal("a reconcile that began after the check was held back")
		}
		if news {
			q.Add(benchRequest)
		}
		q.Done(first)
		second := get("the object the check queued while a worker held it")
		if ran := r.handedOver(key, slot, 0, r.begin(key)); ran != news {
			t.Errorf("with news %v after the first reconcile began, the second one did the work: %v, want %v", news, ran, news)
		}
		q.Done(second)
		if n := q.Len(); n != 0 {
			t.Fatalf("%d objects left in the queue, want none", n)
		}
	}
}

// metadataLister serves the lists of objects' metadata that a fake
// client cannot: it lists the benchObjects whole and keeps their metadata.
type metadataLister struct{ client.Client }

func (m metadataLister) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	metadata, ok := list.(*metav1.PartialObjectMetadataList)
	if !ok {
		return m.Client.List(ctx, list, opts...)
	}
	var whole benchObjectList
	if err := m.Client.List(ctx, &whole, opts...); err != nil {
		return err
	}
	for _, item := range whole.Items {
		metadata.Items = append(metadata.Items, metav1.PartialObjectMetadata{ObjectMeta: item.ObjectMeta})
	}
	return nil
}
