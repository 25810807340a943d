package fsm_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestConvergedObjectCostsNoWritesAndNoEvents(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("converge", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(_ context.Context, r *request) fsm.Result {
			r.Object.Status.Count = 1
			return fsm.Next("Running")
		}, fsm.To("Running")).
		State("Running", func(_ context.Context, r *request) fsm.Result {
			r.Object.Spec.Target = 42 // not kfsm's to write: must cost nothing
			return fsm.Done()
		}, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	e.reconcile(r, "g")
	g := e.get("g")
	if g.Status.State != "Running" || g.Status.Count != 1 || g.Status.ObservedGeneration != g.Generation {
		t.Fatalf("after one reconcile: state %q, count %d, observedGeneration %d", g.Status.State, g.Status.Count, g.Status.ObservedGeneration)
	}
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
	if got := e.writes.Load(); got != 1 {
		t.Errorf("the first reconcile made %d writes, want 1 (the status)", got)
	}

	e.writes.Store(0)
	eventsBefore := len(e.events.all())
	for range 100 {
		e.reconcile(r, "g")
	}
	if got := e.writes.Load(); got != 0 {
		t.Errorf("100 reconciles of a converged object made %d writes, want 0", got)
	}
	if got := len(e.events.all()) - eventsBefore; got != 0 {
		t.Errorf("100 reconciles of a converged object emitted %d events, want 0", got)
	}
}

func TestFinalizerIsAddedBeforeAnyHandler(t *testing.T) {
	e := newEnv(t)
	var sawFinalizer atomic.Bool
	m := fsm.New[*gadget]("finalizer-first", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			var live gadget
			if err := e.direct.Get(ctx, client.ObjectKeyFromObject(r.Object), &live); err != nil {
				return fsm.Fail(err)
			}
			sawFinalizer.Store(slices.Contains(live.Finalizers, "kfsm.dev/finalizer-first"))
			return fsm.Done()
		}, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	if !sawFinalizer.Load() {
		t.Error("the handler ran before the finalizer was stored")
	}
}

func TestMachineWithoutOnDeleteAddsNoFinalizer(t *testing.T) {
	e := newEnv(t)
	r := e.reconciler(fsm.New[*gadget]("no-finalizer", fsm.Lifecycle).Initial("Only").State("Only", done, fsm.Final()))
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	if f := e.get("g").Finalizers; len(f) != 0 {
		t.Errorf("finalizers = %v, want none", f)
	}
}

func TestPipelineDeletionPathRemovesTheFinalizer(t *testing.T) {
	e := newEnv(t)
	var cleaned atomic.Int32
	m := fsm.New[*gadget]("pipeline-deletion", fsm.Pipeline).
		Initial("Apply").
		State("Apply", done, fsm.To("Applied")).
		State("Applied", done, fsm.Final()).
		OnDelete("Deregister").
		State("Deregister", func(context.Context, *request) fsm.Result { cleaned.Add(1); return fsm.Next("Released") }, fsm.To("Released")).
		State("Released", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	g := e.get("g")
	if !slices.Contains(g.Finalizers, m.Finalizer()) {
		t.Fatalf("finalizers = %v, want %s", g.Finalizers, m.Finalizer())
	}
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)

	if err := e.direct.Delete(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, "g")
	err := e.direct.Get(t.Context(), client.ObjectKeyFromObject(g), &gadget{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("after the deletion path: Get() = %v, want NotFound", err)
	}
	if cleaned.Load() != 1 {
		t.Errorf("the deletion handler ran %d times, want 1", cleaned.Load())
	}
}

// staleReads returns the test's counting client, whose reads return the
// gadget that stale holds instead, when it holds one: a cache that lags.
func (e *env) staleReads() (client.Client, *atomic.Pointer[gadget]) {
	stale := &atomic.Pointer[gadget]{}
	return interceptor.NewClient(e.client.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if old := stale.Load(); old != nil {
				old.DeepCopyInto(obj.(*gadget))
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}), stale
}

func TestStaleCacheIsNotActedOn(t *testing.T) {
	e := newEnv(t)
	reads, stale := e.staleReads()
	var calls atomic.Int32
	m := fsm.New[*gadget]("stale", fsm.Lifecycle).
		Initial("Count").
		State("Count", func(_ context.Context, r *request) fsm.Result {
			calls.Add(1)
			r.Object.Status.Count++
			return fsm.Wait(0, "Counting")
		}, fsm.To("Count2")).
		State("Count2", done, fsm.Final())
	r, err := m.Reconciler(reads, e.events)
	if err != nil {
		t.Fatal(err)
	}
	old := e.gadget("g", v1alpha1.GadgetSpec{})

	e.reconcile(r, "g") // writes the status: the cache now lags behind
	stale.Store(old)
	e.writes.Store(0)
	if res := e.reconcile(r, "g"); res.RequeueAfter <= 0 {
		t.Error("a stale read must be retried soon")
	}
	if calls.Load() != 1 || e.writes.Load() != 0 {
		t.Errorf("on a stale copy the handler ran %d times (want 1 in all) and %d writes were made (want 0)", calls.Load(), e.writes.Load())
	}
	stale.Store(nil)
	e.reconcile(r, "g")
	if calls.Load() != 2 {
		t.Errorf("with a fresh copy the handler ran %d times in all, want 2", calls.Load())
	}
	if g := e.get("g"); g.Status.Count != 2 {
		t.Errorf("count = %d, want 2: each run counted once, on fresh data", g.Status.Count)
	}

}

// The mark of kfsm's last write stays: a fresh read that leads to no
// write does not make an older copy, read later, new again.
func TestStaleCopyAfterAFreshReadIsNotActedOn(t *testing.T) {
	e := newEnv(t)
	reads, stale := e.staleReads()
	var calls atomic.Int32
	m := fsm.New[*gadget]("stale-after-fresh", fsm.Lifecycle).
		Initial("Watch").
		State("Watch", func(context.Context, *request) fsm.Result {
			calls.Add(1)
			return fsm.Wait(0, "Watching") // changes nothing after the first run
		}, fsm.To("Done")).
		State("Done", done, fsm.Final())
	r, err := m.Reconciler(reads, e.events)
	if err != nil {
		t.Fatal(err)
	}
	old := e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g") // writes the status
	e.reconcile(r, "g") // reads it back, runs, writes nothing
	if calls.Load() != 2 {
		t.Fatalf("the handler ran %d times on fresh copies, want 2", calls.Load())
	}
	stale.Store(old)
	if res := e.reconcile(r, "g"); res.RequeueAfter <= 0 || calls.Load() != 2 {
		t.Errorf("on a copy older than kfsm's last write, after a fresh read: RequeueAfter %v, %d runs in all; want a retry soon and 2", res.RequeueAfter, calls.Load())
	}
}

// The patch that takes the last finalizer off deletes the object, and
// the API server answers with the object as it was before: a cache that
// lags still holds it, deleted, with the finalizer and the status that
// the deletion path wrote. The deletion path must not run again on that
// copy.
func TestTheDeletionPathRunsNotAgainOnTheCopyBeforeItsLastPatch(t *testing.T) {
	e := newEnv(t)
	reads, stale := e.staleReads()
	var lastCopy atomic.Pointer[gadget]
	reads = interceptor.NewClient(reads.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			var live gadget
			if err := e.direct.Get(ctx, client.ObjectKeyFromObject(obj), &live); err == nil && live.DeletionTimestamp != nil {
				lastCopy.Store(&live)
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	var cleanups atomic.Int32
	m := fsm.New[*gadget]("deleted-once", fsm.Lifecycle).
		Initial("Work").
		State("Work", done, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", func(context.Context, *request) fsm.Result { cleanups.Add(1); return fsm.Done() }, fsm.Final())
	r, err := m.Reconciler(reads, e.events)
	if err != nil {
		t.Fatal(err)
	}
	g := e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	if err := e.direct.Delete(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, "g")
	if err := e.direct.Get(t.Context(), client.ObjectKeyFromObject(g), &gadget{}); !apierrors.IsNotFound(err) || cleanups.Load() != 1 {
		t.Fatalf("after the deletion path: Get() = %v and Cleanup ran %d times, want NotFound and 1", err, cleanups.Load())
	}
	last := lastCopy.Load()
	if last == nil || last.Status.State != "Cleanup" || !slices.Contains(last.Finalizers, m.Finalizer()) {
		t.Fatalf("the copy before the finalizer's patch is %+v, want one in Cleanup with the finalizer", last)
	}

	stale.Store(last)
	e.writes.Store(0)
	res := e.reconcile(r, "g")
	if cleanups.Load() != 1 || e.writes.Load() != 0 {
		t.Errorf("on the copy that a lagging cache holds, Cleanup ran %d times in all and %d writes were made, want 1 and 0", cleanups.Load(), e.writes.Load())
	}
	if res.RequeueAfter <= 0 {
		t.Error("a stale read must be retried soon")
	}
	stale.Store(nil)
	if res := e.reconcile(r, "g"); res.RequeueAfter != 0 || cleanups.Load() != 1 {
		t.Errorf("once the cache has the deletion: RequeueAfter %v, Cleanup ran %d times; want none and 1", res.RequeueAfter, cleanups.Load())
	}
}

// A paused object runs no handler, not even its deletion path, until the
// annotation goes; the Paused condition says so meanwhile.
func TestUnderManagerAPausedObjectRunsNoHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls, cleanups runs
	m := fsm.New[*gadget]("paused", fsm.Lifecycle).
		Initial("Work").
		State("Work", counted(&calls, done), fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", counted(&cleanups, done), fsm.Final())
	run(e, m)
	g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.namespace, Annotations: map[string]string{fsm.AnnotationPaused: "true"}}}
	if err := e.direct.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the Paused condition", func() bool {
		return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionPaused)
	})
	time.Sleep(2 * time.Second)
	if calls.count() != 0 {
		t.Fatalf("a paused object ran its handler %d times", calls.count())
	}

	unpause := func() {
		g := e.get("g")
		delete(g.Annotations, fsm.AnnotationPaused)
		if err := e.direct.Update(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
	unpause()
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	if c := condition(e.get("g"), fsm.ConditionPaused); c != nil || calls.count() != 1 {
		t.Errorf("unpaused: Paused condition %+v, %d runs; want none and 1", c, calls.count())
	}

	// Paused again, the object waits with its finalizer even when deleted.
	g = e.get("g")
	metav1.SetMetaDataAnnotation(&g.ObjectMeta, fsm.AnnotationPaused, "true")
	if err := e.direct.Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the Paused condition", func() bool {
		return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionPaused)
	})
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if cleanups.count() != 0 || e.get("g").DeletionTimestamp == nil {
		t.Fatalf("a paused object's deletion path ran %d times", cleanups.count())
	}
	unpause()
	e.fe.Await("the gadget to be gone", func() bool {
		return apierrors.IsNotFound(e.direct.Get(t.Context(), e.key("g"), &gadget{}))
	})
	if cleanups.count() != 1 {
		t.Errorf("the deletion path ran %d times, want 1", cleanups.count())
	}
}

// Guarantee 5: no handler runs on a copy older than kfsm's last write,
// even when the cache serves old copies again and again.
func TestUnderManagerNoHandlerRunsOnAnOldCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	m := fsm.New[*gadget]("old-copies", fsm.Lifecycle).
		Initial("Count").
		State("Count", counted(&calls, func(_ context.Context, r *request) fsm.Result {
			r.Object.Status.Count++
			if r.Object.Status.Count >= 20 {
				return fsm.Done()
			}
			return fsm.Wait(50*time.Millisecond, "Counting")
		}), fsm.Final())
	l := run(e, m)
	// Every other read of the gadget returns the first copy ever read.
	var first *gadget
	var reads atomic.Int32
	var firstMu sync.Mutex // reads come from the workers and the catch-up of a new leader
	l.mu.Lock()
	l.stale = func(key client.ObjectKey, obj client.Object) {
		g, ok := obj.(*gadget)
		if !ok || key.Name != "g" {
			return
		}
		firstMu.Lock()
		defer firstMu.Unlock()
		switch {
		case first == nil:
			first = g.DeepCopy()
		case reads.Add(1)%2 == 0:
			first.DeepCopyInto(g)
		}
	}
	l.mu.Unlock()
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("twenty counts", func() bool { return e.ready("g") })

	calls.mu.Lock()
	rvs := calls.rvs
	calls.mu.Unlock()
	for i := 1; i < len(rvs); i++ {
		if resourceVersionOf(rvs[i]) <= resourceVersionOf(rvs[i-1]) {
			t.Errorf("run %d saw resourceVersion %s after run %d saw %s", i+1, rvs[i], i, rvs[i-1])
		}
	}
	if g := e.get("g"); g.Status.Count != 20 || len(rvs) != 20 {
		t.Errorf("count %d after %d runs, want 20 after 20: each run on the latest copy", g.Status.Count, len(rvs))
	}
}

func resourceVersionOf(rv string) int {
	var n int
	_, _ = fmt.Sscan(rv, &n)
	return n
}

// Once the deletion path removed the finalizer, a cache that lags still
// holds the object with its finalizer; no handler of the deletion path
// may run again on that old copy. fsmtest fails a test where a handler
// ran on a copy older than one the operator wrote.
func TestNoDeletionHandlerRunsOnACopyOlderThanTheFinalizerRemoval(t *testing.T) {
	t.Parallel()
	machine := func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("stale-deletion", fsm.Lifecycle).
			Initial("Ready").
			State("Ready", func(ctx context.Context, r *request) fsm.Result {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-child", Namespace: r.Object.Namespace}}
				if err := r.Apply(ctx, cm); err != nil {
					return fsm.Fail(err)
				}
				return fsm.Done()
			}, fsm.Final()).
			OnDelete("Cleanup").
			// Done prunes the child: its deletion comes back as an event
			// that leads to the parent, which the cache still has.
			State("Cleanup", func(context.Context, *request) fsm.Result { return fsm.Done() }, fsm.Final()).
			Owns(&corev1.ConfigMap{})
	}
	fsmtest.Faults(t, machine, func(e *fsmtest.Env) {
		g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
		e.Create(g)
		e.AwaitReady(g)
		e.Delete(g)
		e.AwaitGone(g)
		// The late watch events of the deletion arrive meanwhile.
		time.Sleep(time.Second)
	}, fsmtest.Only(fsmtest.StaleReads), fsmtest.Lag(500*time.Millisecond))
}
