package fsm_test

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// handlings records which replica ran a handler for which object, and
// whether two ever ran for one object at once.
type handlings struct {
	mu       sync.Mutex
	running  map[types.UID]string
	by       map[types.UID]string // the replica that ran the latest handler
	overlaps []string
}

func newHandlings() *handlings {
	return &handlings{running: map[types.UID]string{}, by: map[types.UID]string{}}
}

func (h *handlings) handler(replica string) fsm.Handler[*gadget] {
	return func(ctx context.Context, r *request) fsm.Result {
		uid := r.Object.UID
		h.mu.Lock()
		if other, ok := h.running[uid]; ok {
			h.overlaps = append(h.overlaps, fmt.Sprintf("%s ran %s while %s did", replica, r.Object.Name, other))
		}
		h.running[uid] = replica
		h.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name, Namespace: r.Object.Namespace},
			Data: map[string]string{"target": fmt.Sprint(r.Object.Spec.Target)}}
		if err := r.Apply(ctx, cm); err != nil {
			h.mu.Lock()
			delete(h.running, uid)
			h.mu.Unlock()
			return fsm.Fail(err)
		}
		r.Object.Status.Count = r.Object.Spec.Target
		r.Object.Status.Note = replica
		h.mu.Lock()
		delete(h.running, uid)
		h.by[uid] = replica
		h.mu.Unlock()
		return fsm.Done()
	}
}

// share counts the objects whose latest handler each replica ran.
func (h *handlings) share() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, r := range h.by {
		out[r]++
	}
	return out
}

// replica is one replica of a sharded machine in this process.
type replica struct {
	name     string
	stop     context.CancelFunc
	stopped  chan struct{}
	mu       sync.Mutex
	decoded  map[types.UID]bool // the gadgets its cache decoded
	children map[types.UID]bool // and the ConfigMaps
	cache    cache.Cache
	hook     func(any) // sees each object the cache takes in
}

func (r *replica) seen() (gadgets, children int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.decoded), len(r.children)
}

// count is a cache transform that notes the objects decoded, after the
// replica's hook, if it has one, has seen them.
func (r *replica) count(o any) (any, error) {
	if r.hook != nil {
		r.hook(o)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o := o.(type) {
	case *gadget:
		r.decoded[o.UID] = true
	case *corev1.ConfigMap:
		r.children[o.UID] = true
	}
	return o, nil
}

// startReplica runs a manager with a sharded machine, as a replica of
// group "gadgets" would in its own process.
func startReplica(t *testing.T, fe *fsmtest.Env, h *handlings, name string) *replica {
	t.Helper()
	return startReplicaOf(t, fe, name, func(shards *sharding.Shards) *fsm.Machine[*gadget] {
		return fsm.New[*gadget]("sharded", fsm.Pipeline).
			Initial("Counted").
			Owns(&corev1.ConfigMap{}).
			State("Counted", h.handler(name), fsm.To("Done")).
			State("Done", nil, fsm.Final()).
			PublishGraph(false).
			Sharded(shards)
	})
}

// startReplicaOf runs a manager with the sharded machine that machine
// makes, as a replica of group "gadgets" would in its own process. hook,
// if given, sees each object its cache takes in, before the cache holds
// it.
func startReplicaOf(t *testing.T, fe *fsmtest.Env, name string, machine func(*sharding.Shards) *fsm.Machine[*gadget], hook ...func(any)) *replica {
	t.Helper()
	return startReplicaAs(t, fe, fe.Config(), name, machine, hook...)
}

// startReplicaAs is startReplicaOf with the manager acting as cfg says.
func startReplicaAs(t *testing.T, fe *fsmtest.Env, cfg *rest.Config, name string, machine func(*sharding.Shards) *fsm.Machine[*gadget], hook ...func(any)) *replica {
	t.Helper()
	rep := &replica{name: name, stopped: make(chan struct{}), decoded: map[types.UID]bool{}, children: map[types.UID]bool{}}
	if len(hook) > 0 {
		rep.hook = hook[0]
	}
	opts := manager.Options{
		Scheme:  fe.Client.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{fe.Namespace: {}},
			ByObject: map[client.Object]cache.ByObject{
				&gadget{}:           {Transform: rep.count},
				&corev1.ConfigMap{}: {Transform: rep.count},
			},
		},
		// Replicas in one process: each names its controller alike.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	shards, err := sharding.New(cfg, &opts, sharding.Options{
		Name: "gadgets", Namespace: fe.Namespace, Identity: name,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := machine(shards).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	rep.cache = mgr.GetCache()
	ctx, cancel := context.WithCancel(context.Background())
	rep.stop = func() {
		cancel()
		<-rep.stopped
	}
	go func() {
		defer close(rep.stopped)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
	}()
	t.Cleanup(rep.stop)
	return rep
}

// Replicas of a sharded machine share its objects: each reconciles a
// disjoint part, never two the same object at once, and each caches only
// its part. When one leaves, the others take its objects; when one
// joins, it takes a share.
func TestUnderManagerShardedReplicasShareTheObjects(t *testing.T) {
	fe := fsmtest.New(t)
	h := newHandlings()
	a := startReplica(t, fe, h, "a")
	b := startReplica(t, fe, h, "b")
	const n = 60
	for i := range n {
		fe.Create(&gadget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("g-%02d", i)}, Spec: v1alpha1.GadgetSpec{Target: 1}})
	}
	converged := func(target int32) func() bool {
		return func() bool {
			var list v1alpha1.GadgetList
			if err := fe.Client.List(t.Context(), &list, client.InNamespace(fe.Namespace)); err != nil {
				t.Fatal(err)
			}
			for _, g := range list.Items {
				if g.Status.Count != target || !meta.IsStatusConditionTrue(g.Status.Conditions, fsm.ConditionReady) {
					return false
				}
			}
			return len(list.Items) == n
		}
	}
	await(t, "every gadget to converge on two replicas", converged(1))
	share := h.share()
	ag, ac := a.seen()
	bg, bc := b.seen()
	t.Logf("a ran the latest handler of %d gadgets, b of %d; a's cache decoded %d gadgets and %d children, b's %d and %d", share["a"], share["b"], ag, ac, bg, bc)
	if share["a"] == 0 || share["b"] == 0 || share["a"]+share["b"] != n {
		t.Errorf("the replicas handled %v of %d gadgets, want a part each", share, n)
	}
	// The Leases say who holds what, as kubectl fsm get shows it.
	var leases coordinationv1.LeaseList
	if err := fe.Client.List(t.Context(), &leases, client.InNamespace(fe.Namespace), client.MatchingLabels{sharding.LabelShards: "gadgets"}); err != nil {
		t.Fatal(err)
	}
	holder, ok := sharding.Holders(leases.Items, "sharded")
	if !ok {
		t.Fatalf("the Leases %v do not name machine sharded", leases.Items)
	}
	h.mu.Lock()
	for uid, by := range h.by {
		if held := holder(uid); held != by {
			t.Errorf("the Leases say %s holds gadget %s, but %s ran its handler", held, uid, by)
		}
	}
	h.mu.Unlock()
	for _, r := range []*replica{a, b} {
		if gadgets, children := r.seen(); gadgets > n*3/4 || children > n*3/4 {
			t.Errorf("replica %s decoded %d of %d gadgets and %d of their children; the selectors should have kept it to about its part, %d", r.name, gadgets, n, children, share[r.name])
		}
	}

	bump := func(target int32) {
		var list v1alpha1.GadgetList
		if err := fe.Client.List(t.Context(), &list, client.InNamespace(fe.Namespace)); err != nil {
			t.Fatal(err)
		}
		for _, g := range list.Items {
			fe.Update(&g, func() { g.Spec.Target = target })
		}
	}
	b.stop()
	if err := fe.Client.List(t.Context(), &leases, client.InNamespace(fe.Namespace), client.MatchingLabels{sharding.LabelShards: "gadgets"}); err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != 1 || ptr.Deref(leases.Items[0].Spec.HolderIdentity, "") != "a" {
		t.Errorf("after b stopped, the Leases are %v, want a's alone", leaseHolders(leases))
	}
	bump(2)
	await(t, "every gadget to converge on a alone", converged(2))
	if share := h.share(); share["a"] != n {
		t.Errorf("after b left, a handled the latest of %d gadgets, want all %d (%v)", share["a"], n, share)
	}

	startReplica(t, fe, h, "c")
	await(t, "c to hold slots", func() bool {
		if err := fe.Client.List(t.Context(), &leases, client.InNamespace(fe.Namespace), client.MatchingLabels{sharding.LabelShards: "gadgets"}); err != nil {
			t.Fatal(err)
		}
		for _, l := range leases.Items {
			if ptr.Deref(l.Spec.HolderIdentity, "") == "c" && l.Annotations[sharding.AnnotationSlots] != "" {
				return true
			}
		}
		return false
	})
	bump(3)
	await(t, "every gadget to converge on a and c", converged(3))
	if share := h.share(); share["c"] == 0 || share["a"]+share["c"] != n {
		t.Errorf("after c joined, the replicas handled %v of %d gadgets, want a part each", share, n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.overlaps) > 0 {
		t.Errorf("two replicas reconciled one gadget at once:\n%s", slices.Sorted(slices.Values(h.overlaps)))
	}
}

// A change of a gadget that a replica learns of only when it takes the
// gadget's slot is news to the gadgets that watch it: the replica's
// cache takes it in with an event that the catch-up filter keeps from
// the machine's own watch, for the slot's objects are queued anyway,
// but not from the Watches that map it to other gadgets.
func TestUnderManagerAReplicaTakingASlotMapsItsObjectsToTheirWatchers(t *testing.T) {
	fe := fsmtest.New(t)
	var (
		mu      sync.Mutex
		runs    = map[string]int{}
		watcher atomic.Value // the name of the gadget that watches the others
	)
	watcher.Store("")
	machine := func(shards *sharding.Shards) *fsm.Machine[*gadget] {
		return fsm.New[*gadget]("sharded", fsm.Pipeline).
			Initial("Watching").
			Watches(&gadget{}, func(_ context.Context, o client.Object) []reconcile.Request {
				if w := watcher.Load().(string); w != "" && w != o.GetName() {
					return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: w}}}
				}
				return nil
			}).
			State("Watching", func(_ context.Context, r *request) fsm.Result {
				mu.Lock()
				defer mu.Unlock()
				runs[r.Object.Name]++
				return fsm.Wait(0, "Watching")
			}, fsm.To("Done")).
			State("Done", nil, fsm.Final()).
			PublishGraph(false).
			Sharded(shards)
	}
	ran := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[name]
	}
	a := startReplicaOf(t, fe, "a", machine)
	startReplicaOf(t, fe, "b", machine)
	var leases coordinationv1.LeaseList
	await(t, "a and b to hold slots", func() bool {
		if err := fe.Client.List(t.Context(), &leases, client.InNamespace(fe.Namespace), client.MatchingLabels{sharding.LabelShards: "gadgets"}); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range leases.Items {
			if l.Annotations[sharding.AnnotationSlots] != "" {
				n++
			}
		}
		return n == 2
	})
	// A gadget of b's watches one of a's.
	var w, m string
	for i := 0; w == "" || m == ""; i++ {
		if i == 64 {
			t.Fatal("64 gadgets, and not one of a's and one of b's")
		}
		g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("g-%02d", i)}}
		fe.Create(g)
		holder, _ := sharding.Holders(leases.Items, "sharded")
		switch holder(g.UID) {
		case "a":
			m = cmp.Or(m, g.Name)
		case "b":
			w = cmp.Or(w, g.Name)
		}
	}
	await(t, "the gadgets' handlers to run", func() bool { return ran(w) > 0 && ran(m) > 0 })
	watcher.Store(w)
	var g gadget
	if err := fe.Client.Get(t.Context(), client.ObjectKey{Namespace: fe.Namespace, Name: m}, &g); err != nil {
		t.Fatal(err)
	}
	before, seen := ran(w), ran(m)
	fe.Update(&g, func() { g.Spec.Target = 1 })
	await(t, "a to run the changed gadget and write its status", func() bool {
		if err := fe.Client.Get(t.Context(), client.ObjectKeyFromObject(&g), &g); err != nil {
			t.Fatal(err)
		}
		return ran(m) > seen && g.Status.ObservedGeneration == g.Generation
	})
	// Then b's first reconcile of it writes nothing whose echo a watch
	// would map.
	time.Sleep(500 * time.Millisecond)
	if got := ran(w); got != before {
		t.Logf("b ran the watcher %d times for a gadget of a's slots; its cache should not hold them", got-before)
		before = got
	}
	a.stop()
	await(t, "b to run the watcher once it holds the changed gadget", func() bool { return ran(w) > before })
}

// The informer files a version of an object before it hands its event
// on, and the event may wait there behind others: a reconcile that
// another cause started may read the version first. At a hand-over that
// cause is the queueing of every object of a slot taken, beside the
// events of changes that came in meanwhile. The event of a version that
// a reconcile read is no news: it runs no handler a second time on the
// generation, and a change after it still runs one.
func TestUnderManagerAnEventOfAVersionAlreadyReadRunsNoHandler(t *testing.T) {
	fe := fsmtest.New(t)
	var (
		mu   sync.Mutex
		runs = map[string][]int64{} // the generations each gadget's handler ran on
	)
	ran := func(name string, gen int64) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, g := range runs[name] {
			if g == gen {
				n++
			}
		}
		return n
	}
	// The machine's event handler stops at the event of h's generation
	// armed until hold closes, and the events that come after wait behind
	// it.
	var armed atomic.Int64
	held, hold := make(chan struct{}), make(chan struct{})
	stopper := predicate.Funcs{UpdateFunc: func(ev event.UpdateEvent) bool {
		if gen := ev.ObjectNew.GetGeneration(); ev.ObjectNew.GetName() == "h" && gen != 0 && armed.CompareAndSwap(gen, 0) {
			close(held)
			<-hold
		}
		return true
	}}
	a := startReplicaOf(t, fe, "a", func(shards *sharding.Shards) *fsm.Machine[*gadget] {
		return fsm.New[*gadget]("sharded", fsm.Pipeline).
			Initial("Counted").
			Owns(&corev1.ConfigMap{}).
			State("Counted", func(ctx context.Context, r *request) fsm.Result {
				mu.Lock()
				runs[r.Object.Name] = append(runs[r.Object.Name], r.Object.Generation)
				mu.Unlock()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name, Namespace: r.Object.Namespace},
					Data: map[string]string{"target": fmt.Sprint(r.Object.Spec.Target)}}
				if err := r.Apply(ctx, cm); err != nil {
					return fsm.Fail(err)
				}
				r.Object.Status.Count = r.Object.Spec.Target
				return fsm.Done()
			}, fsm.Final()).
			ForOptions(builder.WithPredicates(stopper)).
			Tune(fsm.Tuning{Workers: 1}).
			PublishGraph(false).
			Sharded(shards)
	})
	g, h, k := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}, &gadget{ObjectMeta: metav1.ObjectMeta{Name: "h"}}, &gadget{ObjectMeta: metav1.ObjectMeta{Name: "k"}}
	for _, o := range []*gadget{g, h, k} {
		fe.Create(o)
	}
	await(t, "the gadgets' first runs", func() bool { return ran("g", 1) > 0 && ran("h", 1) > 0 && ran("k", 1) > 0 })

	// h changes until the event handler stops at its change. A reconcile
	// that another cause started (the child's event of h's first run,
	// say) may read a change before its event comes in, the very case
	// below: the event is then no news, kfsm drops it before the stopper
	// sees it, and h changes again.
	hGen := int64(1)
	for stopped := false; !stopped; {
		hGen++
		if hGen > 5 {
			t.Fatalf("h changed %d times, and a reconcile read each change before its event reached the event handler", hGen-2)
		}
		armed.Store(hGen)
		fe.Update(h, func() { h.Spec.Target++ })
		await(t, "h's change to reach the event handler or a reconcile", func() bool {
			select {
			case <-held:
				stopped = true
				return true
			default:
				return ran("h", hGen) > 0
			}
		})
		if !stopped && !armed.CompareAndSwap(hGen, 0) {
			<-held // the stopper took the event after all, and closes held
			stopped = true
		}
	}
	fe.Update(g, func() { g.Spec.Target = 1 })
	await(t, "the cache to hold g's change, whose event waits behind h's", func() bool {
		var cached gadget
		return a.cache.Get(t.Context(), client.ObjectKeyFromObject(g), &cached) == nil && cached.Generation == 2
	})
	// Another cause reconciles g meanwhile: its child changed.
	var cm corev1.ConfigMap
	if err := fe.Client.Get(t.Context(), client.ObjectKeyFromObject(g), &cm); err != nil {
		t.Fatal(err)
	}
	fe.Update(&cm, func() { cm.Labels["touched"] = "by-hand" })
	await(t, "g's handler to run on its change", func() bool { return ran("g", 2) > 0 })
	close(hold)
	// The events come in order, and one worker reconciles in their order:
	// once k's change has run, g's event has been handled.
	fe.Update(k, func() { k.Spec.Target = 1 })
	await(t, "h's and k's handlers to run on their changes", func() bool { return ran("h", hGen) > 0 && ran("k", 2) > 0 })
	if n := ran("g", 2); n != 1 {
		t.Errorf("g's handler ran %d times on generation 2, want once: the event of the version that its reconcile had read ran it again", n)
	}
	fe.Update(g, func() { g.Spec.Target = 2 })
	await(t, "g's handler to run on its next change", func() bool { return ran("g", 3) > 0 })
}

// A replica that takes a slot may have a cache behind the replica that
// held it: that one wrote an object a moment before it let the slot go,
// and the taker's watch has not brought the write yet. The taker must not
// act on the older copy: it checks its cache against the API server for
// the slots it took, and reconciles their objects once its cache holds
// what the API server had. (A Pipeline runs its handlers on every
// reconcile: the taker's run sees what the holder's wrote.)
func TestUnderManagerAReplicaTakingASlotWaitsForTheWritesOfTheOneBefore(t *testing.T) {
	t.Parallel()
	fe := fsmtest.New(t)
	type run struct {
		replica, name string
		gen           int64
		count         int32 // the status the handler saw
	}
	var (
		mu   sync.Mutex
		runs []run
		name string // of the gadget that a's handler stops on
	)
	ran := func(of string, gen int64) []run {
		mu.Lock()
		defer mu.Unlock()
		var out []run
		for _, r := range runs {
			if r.name == of && r.gen == gen {
				out = append(out, r)
			}
		}
		return out
	}
	// a's handler stops on the gadget's second generation until proceed
	// closes; c's cache holds back a's write of it until release closes.
	stopped, proceed, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var proceeding, releasing sync.Once
	t.Cleanup(func() {
		proceeding.Do(func() { close(proceed) })
		releasing.Do(func() { close(release) })
	})
	machine := func(replica string) func(*sharding.Shards) *fsm.Machine[*gadget] {
		return func(shards *sharding.Shards) *fsm.Machine[*gadget] {
			return fsm.New[*gadget]("sharded", fsm.Pipeline).
				Initial("Counted").
				State("Counted", func(ctx context.Context, r *request) fsm.Result {
					mu.Lock()
					runs = append(runs, run{replica, r.Object.Name, r.Object.Generation, r.Object.Status.Count})
					stop := replica == "a" && r.Object.Name == name && r.Object.Generation == 2
					mu.Unlock()
					if stop {
						close(stopped)
						<-proceed
					}
					r.Object.Status.Count = r.Object.Spec.Target
					return fsm.Done()
				}, fsm.Final()).
				PublishGraph(false).
				Sharded(shards)
		}
	}
	holder := func(g *gadget) string {
		var leases coordinationv1.LeaseList
		if err := fe.Client.List(t.Context(), &leases, client.InNamespace(fe.Namespace), client.MatchingLabels{sharding.LabelShards: "gadgets"}); err != nil {
			t.Fatal(err)
		}
		holder, _ := sharding.Holders(leases.Items, "sharded")
		return holder(g.UID)
	}

	// With a and c live, half the slots are c's: g is a gadget in one.
	startReplicaOf(t, fe, "a", machine("a"))
	c := startReplicaOf(t, fe, "c", machine("c"))
	var g *gadget
	for i := 0; g == nil; i++ {
		if i == 20 {
			t.Fatal("none of 20 gadgets went to c")
		}
		o := &gadget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("g-%02d", i)}, Spec: v1alpha1.GadgetSpec{Target: 1}}
		fe.Create(o)
		await(t, o.Name+" to converge", func() bool { return len(ran(o.Name, 1)) > 0 && holder(o) != "" })
		if holder(o) == "c" {
			g = o
		}
	}
	mu.Lock()
	name = g.Name
	mu.Unlock()
	c.stop()
	await(t, "a to hold "+g.Name+"'s slot", func() bool { return holder(g) == "a" })

	// a runs g's second generation and stops inside the handler: g's slot
	// cannot move while it runs.
	fe.Update(g, func() { g.Spec.Target = 2 })
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("a did not run " + g.Name + "'s second generation")
	}

	// c comes back: the rule gives it g's slot again. Its cache takes g in
	// at generation 2 with a count of 1, and then holds back the copy with
	// a's count of 2.
	held := g.Name
	c = startReplicaOf(t, fe, "c", machine("c"), func(o any) {
		if o, ok := o.(*gadget); ok && o.Name == held && o.Status.Count == 2 {
			<-release
		}
	})
	await(t, "c's cache to hold "+g.Name, func() bool {
		var cached gadget
		return c.cache.Get(t.Context(), client.ObjectKeyFromObject(g), &cached) == nil && cached.Generation == 2
	})
	proceeding.Do(func() { close(proceed) })
	await(t, "c to take "+g.Name+"'s slot", func() bool { return holder(g) == "c" })
	// A reconcile of c's copy now would run the handler on a count of 1.
	time.Sleep(2 * time.Second)
	releasing.Do(func() { close(release) })
	await(t, "c to reconcile "+g.Name, func() bool { return slices.ContainsFunc(ran(g.Name, 2), func(r run) bool { return r.replica == "c" }) })
	for _, r := range ran(g.Name, 2) {
		if want := map[string]int32{"a": 1, "c": 2}[r.replica]; r.count != want {
			t.Errorf("%s ran %s's handler on generation 2 seeing a count of %d, want %d: it acted on a copy older than a's write", r.replica, g.Name, r.count, want)
		}
	}
}

func leaseHolders(l coordinationv1.LeaseList) []string {
	holders := map[string]bool{}
	for _, x := range l.Items {
		holders[ptr.Deref(x.Spec.HolderIdentity, "")] = true
	}
	return slices.Sorted(maps.Keys(holders))
}

// await polls cond until it holds, for at most 30 s.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A replica that restarts under the same identity (a StatefulSet's pod,
// say) finds the Lease of its earlier life, which may list slots its
// earlier process still writes to: it deletes it, and claims nothing
// until that process's writes would have stopped, LeaseDuration later.
func TestUnderManagerAReplicaWaitsOutItsEarlierLease(t *testing.T) {
	t.Parallel()
	fe := fsmtest.New(t)
	h := fnv.New32a()
	_, _ = h.Write([]byte("a"))
	holder := "a"
	fe.Create(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gadgets-%08x", h.Sum32()),
			Labels:      map[string]string{sharding.LabelShards: "gadgets"},
			Annotations: map[string]string{sharding.AnnotationSlots: "0-63", sharding.AnnotationMachines: "sharded"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	})
	fe.Create(&gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}, Spec: v1alpha1.GadgetSpec{Target: 1}})
	hs := newHandlings()
	start := time.Now()
	startReplica(t, fe, hs, "a")
	await(t, "the gadget to converge", func() bool {
		var g gadget
		if err := fe.Client.Get(t.Context(), client.ObjectKey{Namespace: fe.Namespace, Name: "g"}, &g); err != nil {
			t.Fatal(err)
		}
		return g.Status.Count == 1
	})
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("the replica reconciled %v after it started, want no sooner than its LeaseDuration, 3 s, after it deleted its earlier Lease", took)
	}
}
