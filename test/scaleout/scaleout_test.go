//go:build linux

package scaleout_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/proctest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// The timing the replicas run with.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = time.Second
	// work is how long a handler works.
	work = 20 * time.Millisecond
)

const (
	// shards is the name of the replicas' group, as the operator sets it.
	shards = "scaleout"
	// machine is the name of the operator's machine, which its Leases list.
	machine = "scaleout"
	// takeoverSlack is what the survivors may take, beyond LeaseDuration
	// and two RetryPeriods, to hold every slot of a replica that was
	// killed or cut off: they see its last renewal up to a RetryPeriod
	// late, claim its slots at their next look, a RetryPeriod later at
	// most, and write their Leases. Quiet, they hold them before
	// LeaseDuration has passed since the kill (its last renewal came
	// before it); the slack is for a loaded machine. How soon they then
	// work through the slots' objects is the machine's throughput, which
	// the benchmarks measure: the tests wait for it without a bound of
	// their own.
	takeoverSlack = 3 * time.Second
	// convergeWithin bounds every wait for the gadgets to converge.
	convergeWithin = 2 * time.Minute
	// shareWithin bounds every wait for the replicas to share the slots.
	shareWithin = time.Minute
)

// shared is how many gadgets TestThreeReplicasShareTheirGadgets shares: 300
// in make test, where every check holds as it does at a fleet's size
// (each replica's share of 64 slots, its cache's slice, the hand-overs),
// and 1,000 in make fleet-test.
var shared = flag.Int("scaleout.gadgets", 300, "gadgets that TestThreeReplicasShareTheirGadgets shares among its replicas")

// TestThreeReplicasShareTheirGadgets scales one operator out to three
// replicas, kills one, adds another, and checks at each step that every
// gadget converges and that no two replicas ever reconcile one gadget at
// once.
func TestThreeReplicasShareTheirGadgets(t *testing.T) {
	gadgets := *shared
	fn := float64(gadgets)
	bin := proctest.Build(t, "./internal/operator")
	env := fsmtest.New(t)
	f := newFleet(t, bin, env.Config(), env.Client, env.Namespace)

	t.Logf("step 1: three replicas share %d gadgets", gadgets)
	f.start("a", "b", "c")
	f.share("a", "b", "c")
	if h := holders(f.leases()); !slices.Equal(h, []string{"a", "b", "c"}) {
		t.Errorf("the membership Leases labelled %s=%s are held by %v, want a, b and c", sharding.LabelShards, shards, h)
	}
	f.create(gadgets)
	converged := f.converge(1, gadgets)
	t.Logf("the %d gadgets converged %v after their creation began", gadgets, latest(converged).Sub(f.createdAt).Round(time.Millisecond))

	t.Log("step 2: in the steady state, each gadget has one replica, and each replica decodes about its share")
	f.rec.check("steady state")
	f.checkRepeats("the steady state", f.createdAt)
	perReplica := map[string]int{}
	for uid, replicas := range f.rec.handlers(1) {
		if len(replicas) != 1 {
			t.Errorf("gadget %s was handled by %v, want exactly one replica", uid, replicas)
		}
		perReplica[replicas[0]]++
	}
	for _, r := range []string{"a", "b", "c"} {
		if share := float64(perReplica[r]) / fn; share < 0.15 || share > 0.55 {
			t.Errorf("%s handled %d of the %d gadgets (%.0f%%), want between 15%% and 55%%", r, perReplica[r], gadgets, 100*share)
		}
	}
	t.Logf("gadgets handled per replica: %v", perReplica)
	steady := f.scrape("a", "b", "c")
	seenInAll := 0.0
	for _, r := range []string{"a", "b", "c"} {
		m := steady[r]
		seen := m.value("scaleout_gadgets_seen")
		decoded := m.value("scaleout_gadgets_decoded_total")
		slotsOwned := m.value("kfsm_shard_slots", "shards", shards)
		seenInAll += seen
		t.Logf("%s owns %v slots and decoded %v gadgets, %v distinct: %.0f%% of the %d", r, slotsOwned, decoded, seen, 100*seen/fn, gadgets)
		if seen >= 0.6*fn {
			t.Errorf("%s's cache decoded %v distinct gadgets, want fewer than 60%% of the %d: its slice, not the whole", r, seen, gadgets)
		}
		// The children carry their parent's slot in a label, which the
		// cache selects by.
		if children := m.value("scaleout_configmaps_seen"); children >= 0.6*fn {
			t.Errorf("%s's cache decoded %v distinct ConfigMaps, want fewer than 60%% of the %d gadgets' children", r, children, gadgets)
		} else {
			t.Logf("%s decoded %v distinct ConfigMaps: %.0f%% of the %d children", r, children, 100*children/fn, gadgets)
		}
		if fb := fallbacks(m); len(fb) > 0 {
			t.Errorf("%s fell back to the whole list and watch for %v, want the shard selector honoured", r, fb)
		}
	}
	t.Logf("the replicas decoded %v distinct gadgets in all, %.2f× the %d", seenInAll, seenInAll/fn, gadgets)

	t.Log("step 3: SIGKILL c; a and b take its gadgets over once its Lease expires")
	ofC := f.rec.lastBy("c")
	killed := f.replicas["c"].Signal(syscall.SIGKILL)
	f.rec.kill("c", killed)
	// One gadget of each of c's slots changes at the kill, and only they:
	// what is bounded is how soon every slot of c's is taken over, not how
	// fast a and b work through c's third of the gadgets on a machine that the
	// race detector and the other test packages load. All of c's gadgets
	// change with the others right after.
	sample := onePerSlot(ofC)
	f.bumpUIDs(2, sample)
	held := f.takenOver("c", sample).Sub(killed)
	convergedOfC := f.convergeUIDs(2, sample)
	t.Logf("SIGKILL at %s; a and b held c's %d slots after %v (bound: LeaseDuration %v + 2 RetryPeriods %v + %v); a gadget from each: the first handler run began after %v, the last ended after %v, the last gadget was seen converged after %v",
		killed.Format("15:04:05.000"), len(sample), held.Round(time.Millisecond), leaseDuration, 2*retryPeriod, takeoverSlack,
		f.rec.firstBegin(sample, 2).Sub(killed).Round(time.Millisecond), f.rec.lastEnd(sample, 2).Sub(killed).Round(time.Millisecond),
		latest(convergedOfC).Sub(killed).Round(time.Millisecond))
	if bound := leaseDuration + 2*retryPeriod + takeoverSlack; held > bound {
		t.Errorf("a and b held every slot of c's %v after the SIGKILL, want within %v", held.Round(time.Millisecond), bound)
	}
	f.bump(2, gadgets)
	f.converge(2, gadgets)
	if code := f.replicas["c"].WaitExit(10 * time.Second); code != -1 {
		t.Errorf("c exited with %d after SIGKILL, want death by the signal", code)
	}
	round2 := f.rec.last(2)
	for _, uid := range ofC {
		if r := round2[uid]; r != "a" && r != "b" {
			t.Errorf("c's gadget %s was last handled by %q on generation 2, want a or b", uid, r)
		}
	}
	f.checkNotes(round2)
	f.rec.check("after c was killed")
	f.checkRepeats("c's death", killed)
	f.share("a", "b")

	t.Log("step 4: d joins and takes its share")
	joined := time.Now()
	f.start("d")
	f.share("a", "b", "d")
	f.bump(3, gadgets)
	f.converge(3, gadgets)
	round3 := f.rec.last(3)
	moved, byD := 0, 0
	for uid, r := range round3 {
		if r != round2[uid] {
			moved++
		}
		if r == "d" {
			byD++
		}
	}
	t.Logf("%d of the %d gadgets moved to another replica when d joined; d handles %d (%.0f%%)", moved, gadgets, byD, 100*float64(byD)/fn)
	if moved < 1 || float64(moved) > 0.6*fn {
		t.Errorf("%d of the %d gadgets moved when d joined, want between 1 and 60%%", moved, gadgets)
	}
	if float64(byD) < 0.15*fn {
		t.Errorf("d handles %d of the %d gadgets, want at least 15%%", byD, gadgets)
	}
	f.checkNotes(round3)
	f.rec.check("after d joined")
	f.checkRepeats("d's joining", joined)
	for _, r := range []string{"a", "b", "d"} {
		t.Logf("%s's handovers: %v", r, f.scrape(r)[r].series("kfsm_shard_handovers_total"))
	}

	t.Log("step 5: SIGTERM ends a, b and d, which remove their Leases")
	f.stop("a", "b", "d")
	if h := holders(f.leases()); len(h) > 0 && !slices.Equal(h, []string{"c"}) {
		t.Errorf("after a, b and d stopped, membership Leases are held by %v, want none but the killed c's", h)
	}
	t.Logf("handler runs per replica: %v", f.rec.runsBy())
	f.rec.check("at the end")
	if open := f.rec.unfinished(); len(open) > 0 {
		t.Errorf("%d runs of replicas that stopped cleanly never ended: %s", len(open), first(open, 10))
	}
}

// TestAFrozenReplicaActsOnNothingItLost freezes one of two replicas
// (SIGSTOP) past its Lease: the other takes its gadgets over, and when
// the frozen one wakes (SIGCONT) it runs no handler until it has joined
// again with a new Lease and been given slots, however stale its cache
// and its queue.
func TestAFrozenReplicaActsOnNothingItLost(t *testing.T) {
	const gadgets = 200
	bin := proctest.Build(t, "./internal/operator")
	env := fsmtest.New(t)
	f := newFleet(t, bin, env.Config(), env.Client, env.Namespace)
	f.start("a", "b")
	f.share("a", "b")
	f.create(gadgets)
	f.converge(1, gadgets)
	ofB := f.rec.lastBy("b")

	stopped := f.replicas["b"].Signal(syscall.SIGSTOP)
	f.bumpUIDs(2, ofB)
	f.share("a")
	convergedOfB := f.convergeUIDs(2, ofB)
	t.Logf("b frozen at %s; a held every slot and had converged b's %d gadgets %v later",
		stopped.Format("15:04:05.000"), len(ofB), latest(convergedOfB).Sub(stopped).Round(time.Millisecond))
	// Every gadget at the same generation again, for the notes below.
	f.bump(2, gadgets)
	f.converge(2, gadgets)
	f.checkRepeats("b's freeze", stopped)

	woke := f.replicas["b"].Signal(syscall.SIGCONT)
	f.share("a", "b")
	rejoined := f.acquired("b")
	if !rejoined.After(woke) {
		t.Fatalf("b's Lease was acquired at %v, want a new Lease after it woke at %v: the old one should have been deleted", rejoined, woke)
	}
	early := f.rec.begunBy("b", woke, rejoined)
	t.Logf("b woke at %s and took a new Lease %v later; it began %d runs in between", woke.Format("15:04:05.000"), rejoined.Sub(woke).Round(time.Millisecond), len(early))
	if len(early) > 0 {
		t.Errorf("b ran handlers after it woke and before it joined again: %s", first(early, 10))
	}
	f.bump(3, gadgets)
	f.converge(3, gadgets)
	f.checkNotes(f.rec.last(3))
	f.rec.check("after b woke")
	f.checkRepeats("b's waking", woke)
	f.stop("a", "b")
}

// TestFallbackWithoutShardedWatch runs two replicas on an API server
// without the sharded list and watch: each caches every gadget, and they
// still share the reconciles.
func TestFallbackWithoutShardedWatch(t *testing.T) {
	const gadgets = 200
	bin := proctest.Build(t, "./internal/operator")
	c, err := cluster.Start(t.Context(), cluster.Options{
		CRDPaths:     []string{crdPath},
		FeatureGates: map[string]bool{"ShardedListAndWatch": false},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scaleout"}}
	if err := cl.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, bin, cfg, cl, ns.Name)

	f.start("a", "b")
	f.share("a", "b")
	f.create(gadgets)
	converged := f.converge(1, gadgets)
	t.Logf("the %d gadgets converged %v after their creation began", gadgets, latest(converged).Sub(f.createdAt).Round(time.Millisecond))
	f.rec.check("converged")
	perReplica := map[string]int{}
	for uid, replicas := range f.rec.handlers(1) {
		if len(replicas) != 1 {
			t.Errorf("gadget %s was handled by %v, want exactly one replica", uid, replicas)
		}
		perReplica[replicas[0]]++
	}
	t.Logf("gadgets handled per replica: %v", perReplica)
	f.checkNotes(f.rec.last(1))
	for r, m := range f.scrape("a", "b") {
		fb := fallbacks(m)
		t.Logf("%s: fallback %v, gadgets decoded %v", r, m.series("kfsm_shard_fallback"), m.series("scaleout_gadgets_decoded_total"))
		if !slices.ContainsFunc(fb, func(resource string) bool { return strings.HasPrefix(resource, "gadgets") }) {
			t.Errorf("%s reports kfsm_shard_fallback %v, want 1 for the gadgets", r, m.series("kfsm_shard_fallback"))
		}
		if seen := m.value("scaleout_gadgets_seen"); seen != gadgets {
			t.Errorf("%s's cache decoded %v distinct gadgets, want all %d: without the shard selector it lists them all", r, seen, gadgets)
		}
	}

	f.stop("a", "b")
	if h := holders(f.leases()); len(h) > 0 {
		t.Errorf("after a and b stopped, membership Leases are held by %v, want none", h)
	}
	f.rec.check("at the end")
	if open := f.rec.unfinished(); len(open) > 0 {
		t.Errorf("%d runs of replicas that stopped cleanly never ended: %s", len(open), first(open, 10))
	}
}

// fleet is a test's replicas of the operator, the namespace where they
// share the gadgets, and the recorder that their handlers report to.
type fleet struct {
	t          *testing.T
	bin        string
	kubeconfig string
	namespace  string
	client     client.Client
	rec        *recorder
	replicas   map[string]*process
	seen       *tracker
	createdAt  time.Time // when the test began to create the gadgets
}

func newFleet(t *testing.T, bin string, cfg *rest.Config, c client.Client, namespace string) *fleet {
	t.Helper()
	return &fleet{
		t: t, bin: bin, kubeconfig: proctest.Kubeconfig(t, cfg), namespace: namespace, client: c,
		rec: newRecorder(t), replicas: map[string]*process{}, seen: newTracker(t, cfg, c.Scheme(), namespace),
	}
}

// start starts the named replicas.
func (f *fleet) start(names ...string) {
	f.t.Helper()
	for _, n := range names {
		f.startWith(n, f.kubeconfig)
	}
}

// startWith starts the named replica with its own kubeconfig.
func (f *fleet) startWith(name, kubeconfig string) {
	f.t.Helper()
	f.replicas[name] = startOperator(f.t, f.bin, kubeconfig, f.namespace, name, f.rec.URL())
}

// stop sends SIGTERM to the named replicas and checks that they exit
// with status 0.
func (f *fleet) stop(names ...string) {
	f.t.Helper()
	for _, n := range names {
		f.replicas[n].Signal(syscall.SIGTERM)
	}
	for _, n := range names {
		if code := f.replicas[n].WaitExit(time.Minute); code != 0 {
			f.t.Errorf("%s exited with %d after SIGTERM, want 0", n, code)
		}
	}
}

// scrape reads the metrics of the named replicas.
func (f *fleet) scrape(names ...string) map[string]metrics {
	f.t.Helper()
	out := map[string]metrics{}
	for _, n := range names {
		m, err := f.replicas[n].scrape(f.t.Context())
		if err != nil {
			f.t.Fatal(err)
		}
		out[n] = m
	}
	return out
}

// share waits until the named replicas share the slots: each counts them
// all as members and owns some slots, and together they own all 64, the
// same at two scrapes in a row.
func (f *fleet) share(names ...string) {
	f.t.Helper()
	var previous string
	f.eventually(shareWithin, 500*time.Millisecond, func() (bool, string) {
		var owned []string
		total := 0
		for _, n := range names {
			m, err := f.replicas[n].scrape(f.t.Context())
			if err != nil {
				return false, err.Error()
			}
			members := m.value("kfsm_shard_members", "shards", shards)
			s := m.value("kfsm_shard_slots", "shards", shards)
			if int(members) != len(names) || s == 0 {
				return false, fmt.Sprintf("%s counts %v members and owns %v slots; want %d members sharing the slots", n, members, s, len(names))
			}
			total += int(s)
			owned = append(owned, fmt.Sprintf("%s %d", n, int(s)))
		}
		now := strings.Join(owned, ", ")
		stable := now == previous
		previous = now
		return total == sharding.NumSlots && stable, fmt.Sprintf("the replicas own %s slots, %d in all, want %d in two scrapes in a row", now, total, sharding.NumSlots)
	})
	f.t.Logf("the slots are shared: %s", previous)
}

// leases lists the membership Leases of the replicas' group.
func (f *fleet) leases() []coordinationv1.Lease {
	f.t.Helper()
	var l coordinationv1.LeaseList
	if err := f.client.List(f.t.Context(), &l, client.InNamespace(f.namespace), client.MatchingLabels{sharding.LabelShards: shards}); err != nil {
		f.t.Fatal(err)
	}
	return l.Items
}

// holders returns the sorted holders of leases.
func holders(leases []coordinationv1.Lease) []string {
	var out []string
	for _, l := range leases {
		out = append(out, deref(l.Spec.HolderIdentity))
	}
	slices.Sort(out)
	return out
}

// fallbacks returns the resources for which a replica reports that the
// API server did not honour the shard selector.
func fallbacks(m metrics) []string {
	var out []string
	for _, s := range m["kfsm_shard_fallback"].GetMetric() {
		if s.GetGauge().GetValue() != 1 {
			continue
		}
		for _, l := range s.GetLabel() {
			if l.GetName() == "resource" {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

// name is the name of the i-th gadget.
func name(i int) string { return fmt.Sprintf("g-%04d", i) }

// create creates n gadgets with target 1.
func (f *fleet) create(n int) {
	f.t.Helper()
	f.createdAt = time.Now()
	inParallel(f.t, n, func(i int) error {
		g := &v1alpha1.Gadget{
			ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: f.namespace},
			Spec:       v1alpha1.GadgetSpec{Target: 1},
		}
		return f.client.Create(f.t.Context(), g)
	})
}

// bump sets the target of the n gadgets.
func (f *fleet) bump(target int32, n int) {
	f.t.Helper()
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"target":%d}}`, target))
	inParallel(f.t, n, func(i int) error {
		return f.client.Patch(f.t.Context(), &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: f.namespace}}, patch)
	})
}

// bumpUIDs raises the target of the gadgets with the UIDs.
func (f *fleet) bumpUIDs(target int32, uids []types.UID) {
	f.t.Helper()
	var gs v1alpha1.GadgetList
	if err := f.seen.cache.List(f.t.Context(), &gs); err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, g := range gs.Items {
		if slices.Contains(uids, g.UID) {
			names = append(names, g.Name)
		}
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"target":%d}}`, target))
	inParallel(f.t, len(names), func(i int) error {
		return f.client.Patch(f.t.Context(), &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: f.namespace}}, patch)
	})
}

// convergeUIDs waits until the gadgets with the UIDs have converged on
// target, and returns when each was first seen so.
func (f *fleet) convergeUIDs(target int32, uids []types.UID) map[types.UID]time.Time {
	f.t.Helper()
	at := map[types.UID]time.Time{}
	f.eventually(convergeWithin, 100*time.Millisecond, func() (bool, string) {
		converged := f.seen.convergedOn(target)
		for _, uid := range uids {
			if _, ok := converged[uid]; !ok {
				return false, fmt.Sprintf("gadget %s has yet to converge on target %d", uid, target)
			}
			at[uid] = converged[uid]
		}
		return true, ""
	})
	return at
}

// takenOver waits until the replica gone has no Lease and others hold
// the slots of the gadgets with the UIDs, and returns when that was first
// seen: the Leases are read every 100 ms.
func (f *fleet) takenOver(gone string, uids []types.UID) time.Time {
	f.t.Helper()
	f.eventually(shareWithin, 100*time.Millisecond, func() (bool, string) {
		leases := f.leases()
		if slices.Contains(holders(leases), gone) {
			return false, gone + " still has a Lease"
		}
		holder, ok := sharding.Holders(leases, machine)
		if !ok {
			return false, "no Lease shards machine " + machine
		}
		for _, uid := range uids {
			if holder(uid) == "" {
				return false, fmt.Sprintf("no replica holds the slot of gadget %s, %d", uid, sharding.SlotOf(uid))
			}
		}
		return true, ""
	})
	return time.Now()
}

// convergedBy waits until the gadgets with the UIDs have converged on
// target, or until deadline; it returns when each of those converged was
// first seen so, and whether all were.
func (f *fleet) convergedBy(target int32, uids []types.UID, deadline time.Time) (map[types.UID]time.Time, bool) {
	for {
		converged := f.seen.convergedOn(target)
		at := map[types.UID]time.Time{}
		for _, uid := range uids {
			if c, ok := converged[uid]; ok {
				at[uid] = c
			}
		}
		if len(at) == len(uids) || time.Now().After(deadline) {
			return at, len(at) == len(uids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkRepeats fails the test if, since a hand-over began, the handler
// of some gadget ran to completion more than once on one generation.
func (f *fleet) checkRepeats(handover string, since time.Time) {
	f.t.Helper()
	repeated := f.rec.repeated(since)
	runs, pairs := f.rec.completed()
	f.t.Logf("%s: %d gadgets ran to completion more than once on a generation; in all, %d completed runs of %d gadgets and generations, %.2f×",
		handover, len(repeated), runs, pairs, float64(runs)/float64(max(pairs, 1)))
	// A replica that renews its Lease late has its writes cut off by the
	// fence, and the reconcile whose status write was cut runs again: that
	// repeat is the fence's work, not a hand-over's.
	cut := f.cutOff()
	unexplained := slices.DeleteFunc(repeated, func(r string) bool {
		uid, _, _ := strings.Cut(r, " ")
		return cut[types.UID(uid)]
	})
	if n := len(repeated) - len(unexplained); n > 0 {
		f.t.Logf("%s: %d of them after the fence cut off a write of theirs", handover, n)
	}
	if len(unexplained) > 0 {
		f.t.Errorf("%s: %d gadgets ran to completion more than once on a generation, want at most once: %s\nwhat the replicas logged of them:\n%s",
			handover, len(unexplained), first(unexplained, 5), f.loggedOf(unexplained[:min(len(unexplained), 5)]))
	}
}

// loggedOf returns the lines of the replicas' logs that name the gadgets
// of repeats (each "uid gen …"), with each gadget's slot, and the lines
// of every move of slots, so that a failure shows what happened to them.
func (f *fleet) loggedOf(repeats []string) string {
	f.t.Helper()
	var gs v1alpha1.GadgetList
	if err := f.seen.cache.List(f.t.Context(), &gs); err != nil {
		return err.Error()
	}
	names := map[types.UID]string{}
	for _, g := range gs.Items {
		names[g.UID] = g.Name
	}
	var b strings.Builder
	for _, r := range repeats {
		uid, _, _ := strings.Cut(r, " ")
		name := names[types.UID(uid)]
		fmt.Fprintf(&b, "%s (%s, slot %d):\n", name, uid, sharding.SlotOf(types.UID(uid)))
		if name == "" {
			continue
		}
		for replica, p := range f.replicas {
			for l := range strings.Lines(p.Log()) {
				if strings.Contains(l, `"name"="`+name+`"`) || strings.Contains(l, "/"+name+" ") || strings.Contains(l, "/"+name+"/") || strings.Contains(l, "/"+name+`\"`) {
					fmt.Fprintf(&b, "  %s: %s", replica, l)
				}
			}
		}
	}
	// A slot that moves, even back to the replica that held it, has its
	// objects reconciled again by the replica that takes it.
	b.WriteString("the moves of slots:\n")
	for replica, p := range f.replicas {
		for l := range strings.Lines(p.Log()) {
			for _, move := range []string{`"took slots"`, `"released slots"`, "giving up every slot", "Lease expired; deleted it"} {
				if strings.Contains(l, move) {
					fmt.Fprintf(&b, "  %s: %s", replica, l)
					break
				}
			}
		}
	}
	return b.String()
}

// cutOff returns the UIDs of the gadgets that some replica's fence cut a
// write of off, or refused, as the replicas' logs tell: of the gadget or
// of its ConfigMap, which has its name. An apply whose answer the fence
// cut off may have landed, and its watch event, of a version the replica
// never learned, then reconciles the gadget again as someone else's
// change would.
func (f *fleet) cutOff() map[types.UID]bool {
	f.t.Helper()
	names := map[string]bool{}
	for _, p := range f.replicas {
		for _, m := range cutOffWrite.FindAllStringSubmatch(p.Log(), -1) {
			names[m[1]] = true
		}
	}
	uids := map[types.UID]bool{}
	if len(names) == 0 {
		return uids
	}
	var gs v1alpha1.GadgetList
	if err := f.seen.cache.List(f.t.Context(), &gs); err != nil {
		f.t.Fatal(err)
	}
	for _, g := range gs.Items {
		if names[g.Name] {
			uids[g.UID] = true
		}
	}
	return uids
}

// cutOffWrite matches the fence's errors for a write of a gadget or of
// its ConfigMap: one cut off on its way, or refused before it was sent.
var cutOffWrite = regexp.MustCompile(`/(?:gadgets|configmaps)/([a-z0-9-]+)(?:/status)? (?:cut off|refused): this process`)

// acquired returns when replica's Lease was acquired.
func (f *fleet) acquired(replica string) time.Time {
	f.t.Helper()
	for _, l := range f.leases() {
		if deref(l.Spec.HolderIdentity) == replica && l.Spec.AcquireTime != nil {
			return l.Spec.AcquireTime.Time
		}
	}
	return time.Time{}
}

// converge waits until each of the n gadgets has converged on target,
// and returns when each was first seen so.
func (f *fleet) converge(target int32, n int) map[types.UID]time.Time {
	f.t.Helper()
	f.eventually(convergeWithin, 100*time.Millisecond, func() (bool, string) {
		if got := len(f.seen.convergedOn(target)); got < n {
			return false, fmt.Sprintf("%d of %d gadgets have yet to converge on target %d, such as %s", n-got, n, target, first(f.seen.pending(target), 5))
		}
		return true, ""
	})
	return f.seen.convergedOn(target)
}

// tracker follows the gadgets and their ConfigMaps through a cache of
// the test's own, and notes when it first saw each gadget converged on
// each target: its status counts to the target for its generation, it is
// Ready, and its ConfigMap holds the target. A cache costs the API
// server one event per change, where polling would cost lists of every
// gadget.
type tracker struct {
	cache     cache.Cache
	namespace string

	mu        sync.Mutex
	converged map[int32]map[types.UID]time.Time // by target
}

func newTracker(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, namespace string) *tracker {
	t.Helper()
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracker{cache: c, namespace: namespace, converged: map[int32]map[types.UID]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := c.Start(ctx); err != nil {
			t.Errorf("the test's cache: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	for _, obj := range []client.Object{&v1alpha1.Gadget{}, &corev1.ConfigMap{}} {
		inf, err := c.GetInformer(t.Context(), obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { tr.changed(o) },
			UpdateFunc: func(_, o any) { tr.changed(o) },
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !c.WaitForCacheSync(t.Context()) {
		t.Fatal("the test's cache did not sync")
	}
	return tr
}

// changed looks at the gadget that a gadget or a ConfigMap belongs to,
// as the cache has it now, which is no older than the change.
func (tr *tracker) changed(o any) {
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	now := time.Now()
	var g v1alpha1.Gadget
	if err := tr.cache.Get(context.Background(), client.ObjectKey{Namespace: tr.namespace, Name: obj.GetName()}, &g); err != nil {
		return
	}
	if !tr.isConverged(&g) {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	at := tr.converged[g.Spec.Target]
	if at == nil {
		at = map[types.UID]time.Time{}
		tr.converged[g.Spec.Target] = at
	}
	if _, ok := at[g.UID]; !ok {
		at[g.UID] = now
	}
}

// isConverged says whether g has converged on its target.
func (tr *tracker) isConverged(g *v1alpha1.Gadget) bool {
	var cm corev1.ConfigMap
	if err := tr.cache.Get(context.Background(), client.ObjectKey{Namespace: tr.namespace, Name: g.Name}, &cm); err != nil {
		return false
	}
	return g.Status.Count == g.Spec.Target && g.Status.ObservedGeneration == g.Generation &&
		meta.IsStatusConditionTrue(g.Status.Conditions, "Ready") && cm.Data["target"] == strconv.Itoa(int(g.Spec.Target))
}

// convergedOn returns when each gadget was first seen converged on
// target.
func (tr *tracker) convergedOn(target int32) map[types.UID]time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.converged[target])
}

// pending describes the gadgets not yet converged on target.
func (tr *tracker) pending(target int32) []string {
	var gs v1alpha1.GadgetList
	if err := tr.cache.List(context.Background(), &gs); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, g := range gs.Items {
		if g.Spec.Target != target || !tr.isConverged(&g) {
			out = append(out, fmt.Sprintf("%s (target %d, generation %d, observed %d, count %d, note %q)",
				g.Name, g.Spec.Target, g.Generation, g.Status.ObservedGeneration, g.Status.Count, g.Status.Note))
		}
	}
	slices.Sort(out)
	return out
}

// checkNotes fails the test for each gadget whose status.note does not
// name the replica that the recorder saw handle it last.
func (f *fleet) checkNotes(last map[types.UID]string) {
	f.t.Helper()
	var gs v1alpha1.GadgetList
	if err := f.client.List(f.t.Context(), &gs, client.InNamespace(f.namespace)); err != nil {
		f.t.Fatal(err)
	}
	var wrong []string
	for _, g := range gs.Items {
		if g.Status.Note != last[g.UID] {
			wrong = append(wrong, fmt.Sprintf("%s noted by %q, last handled by %q", g.Name, g.Status.Note, last[g.UID]))
		}
	}
	if len(wrong) > 0 {
		f.t.Errorf("%d gadgets' status.note differs from the recorder's last handler: %s", len(wrong), first(wrong, 5))
	}
}

// lastBy lists the objects that replica handled last.
func (r *recorder) lastBy(replica string) []types.UID {
	var out []types.UID
	for uid, last := range r.last(0) {
		if last == replica {
			out = append(out, uid)
		}
	}
	return out
}

// onePerSlot returns one of uids from each slot that they fall in.
func onePerSlot(uids []types.UID) []types.UID {
	bySlot := map[int]types.UID{}
	for _, uid := range uids {
		bySlot[sharding.SlotOf(uid)] = uid
	}
	return slices.Collect(maps.Values(bySlot))
}

// latest is the latest of the times.
func latest(at map[types.UID]time.Time) time.Time {
	var l time.Time
	for t := range maps.Values(at) {
		l = later(l, t)
	}
	return l
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// inParallel runs do for 0 to n-1 on a few goroutines, and fails the test
// if any failed.
func inParallel(t *testing.T, n int, do func(i int) error) {
	t.Helper()
	var next atomic.Int64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				errs[i] = do(i)
			}
		})
	}
	wg.Wait()
	var failed []string
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d failed: %s", len(failed), n, first(failed, 5))
	}
}

// eventually polls cond every interval until it holds, and fails the
// test with cond's last word after within, or at once if a replica has
// exited by itself meanwhile.
func (f *fleet) eventually(within, interval time.Duration, cond func() (bool, string)) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		switch {
		case ok:
			return
		case f.died():
			f.t.Fatalf("gave up waiting, as a replica exited by itself: %s", why)
		case time.Now().After(deadline):
			f.t.Fatalf("after %v: %s", within, why)
		}
		select {
		case <-f.t.Context().Done():
			f.t.Fatalf("the test ended while waiting: %s", why)
		case <-time.After(interval):
		}
	}
}

// died reports whether a replica has exited by itself.
func (f *fleet) died() bool {
	for _, p := range f.replicas {
		if p.Died() {
			return true
		}
	}
	return false
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
