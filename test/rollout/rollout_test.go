//go:build linux

package rollout_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/proctest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// The timing the operators run with.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = time.Second
	// tick is how often the owner of a gadget writes its status.
	tick = 300 * time.Millisecond
	// within bounds every wait: generous, as the scenarios run at once on
	// a machine that the race detector and other tests load.
	within = 2 * time.Minute
)

// The machine and its objects as the test sees them.
const (
	machine = "rollout"
	// lease is the Lease of the leader election, and the group of the
	// sharded replicas.
	lease = "rollout"
	// leaveWord is in the log line with which a process leaves a gadget
	// that a newer version wrote.
	leaveWord = "leaves it to a newer one"
)

// TestRollout runs two operators of two versions of one graph at once,
// in each scenario's namespace: sharded replicas that pass the slots back
// and forth, and a leader election that hands over to the new version and
// back. The negative control runs the leader election with an old
// version that cannot see the graph version, and proves that the
// recorder sees its writes.
func TestRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("the operator processes of two versions run without -short")
	}
	bin := proctest.Build(t, "./internal/operator")
	t.Run("Scenarios", func(t *testing.T) {
		t.Run("ShardedReplicasOfTwoVersions", func(t *testing.T) {
			t.Parallel()
			testSharded(t, bin)
		})
		t.Run("LeaderHandsOverToTheNewVersionAndBack", func(t *testing.T) {
			t.Parallel()
			testLeader(t, bin, false)
		})
		t.Run("UncheckedOldLeaderWritesOverTheNewVersion", func(t *testing.T) {
			t.Parallel()
			testLeader(t, bin, true)
		})
	})
}

// scenario is one scenario's cluster side.
type scenario struct {
	t   *testing.T
	env *fsmtest.Env
	rec *recorder
	run run
}

func newScenario(t *testing.T, bin, mode string, ignoreNewer bool) *scenario {
	t.Helper()
	env := fsmtest.New(t)
	rec := newRecorder(t, env.Config())
	t.Cleanup(func() {
		if t.Failed() {
			rec.dump()
		}
	})
	return &scenario{t: t, env: env, rec: rec, run: run{bin: bin, namespace: env.Namespace, mode: mode, rec: rec, ignoreNewer: ignoreNewer}}
}

func (s *scenario) start(name string, version int) *process {
	s.t.Helper()
	return s.run.start(s.t, name, version)
}

// name is the name of the i-th gadget.
func name(i int) string { return fmt.Sprintf("g-%02d", i) }

// create creates n gadgets with the targets 1 to 4 in turn, two at a time,
// so that each target has names of both parities, Left's and Right's.
func (s *scenario) create(n int) {
	s.t.Helper()
	for i := range n {
		s.env.Create(&v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: name(i)}, Spec: v1alpha1.GadgetSpec{Target: int32(i/2%4) + 1}})
	}
}

// gadgets reads the gadgets from the API server, by name.
func (s *scenario) gadgets() map[string]*v1alpha1.Gadget {
	s.t.Helper()
	var l v1alpha1.GadgetList
	if err := s.env.Client.List(s.t.Context(), &l, client.InNamespace(s.env.Namespace)); err != nil {
		s.t.Fatal(err)
	}
	out := map[string]*v1alpha1.Gadget{}
	for i := range l.Items {
		out[l.Items[i].Name] = &l.Items[i]
	}
	return out
}

// await waits until is holds of every gadget, and returns them.
func (s *scenario) await(what string, is func(*v1alpha1.Gadget) bool) map[string]*v1alpha1.Gadget {
	s.t.Helper()
	var gs map[string]*v1alpha1.Gadget
	eventually(s.t, within, what, func() (bool, string) {
		gs = s.gadgets()
		var not []string
		for _, n := range slices.Sorted(maps.Keys(gs)) {
			if g := gs[n]; !is(g) {
				not = append(not, fmt.Sprintf("%s (target %d, state %s, graph version %d)", n, g.Spec.Target, g.Status.State, g.Status.GraphVersion))
			}
		}
		return len(not) == 0, fmt.Sprintf("%d gadgets are not: %s", len(not), first(not, 5))
	})
	return gs
}

// versionOne is the state that version 1 moves a gadget to.
func versionOne(g *v1alpha1.Gadget) fsm.State {
	return map[int32]fsm.State{1: "Old", 2: "Both", 3: "Gone", 4: "Kept"}[g.Spec.Target]
}

// versionTwo is the state that version 2 has a gadget of version 1 in.
func versionTwo(g *v1alpha1.Gadget) fsm.State {
	switch versionOne(g) {
	case "Old":
		return "New"
	case "Both":
		if g.Name[len(g.Name)-1]%2 == 0 {
			return "Left"
		}
		return "Right"
	}
	return "Kept"
}

// restInVersionOne waits until version 1 has moved every gadget and
// written it, without a graph version.
func (s *scenario) restInVersionOne() {
	s.t.Helper()
	s.await("every gadget at rest in version 1", func(g *v1alpha1.Gadget) bool {
		return g.Status.State == versionOne(g) && g.Status.GraphVersion == 0 && g.Status.Count > 0
	})
}

// inVersionTwo waits until every gadget is at graph version 2, in the
// state that version 2 has it in.
func (s *scenario) inVersionTwo() map[string]*v1alpha1.Gadget {
	s.t.Helper()
	return s.await("every gadget at graph version 2", func(g *v1alpha1.Gadget) bool {
		return g.Status.GraphVersion == 2 && g.Status.State == versionTwo(g)
	})
}

// checkMigrated fails the test for each gadget that is not in version
// 2's state with a history that holds version 1's move and, where the
// state changed, one move marked Migrated, last.
func (s *scenario) checkMigrated(gs map[string]*v1alpha1.Gadget) {
	s.t.Helper()
	for _, n := range slices.Sorted(maps.Keys(gs)) {
		g := gs[n]
		before, after, h := versionOne(g), versionTwo(g), g.Status.History
		if g.Status.GraphVersion != 2 || g.Status.State != after {
			s.t.Errorf("%s is in %s at graph version %d, want %s at 2", n, g.Status.State, g.Status.GraphVersion, after)
		}
		if len(h) < 2 || h[0].To != "Start" || h[1].From != "Start" || h[1].To != before {
			s.t.Errorf("%s: history %s lost version 1's move Start→%s", n, history(h), before)
			continue
		}
		migrated := slices.DeleteFunc(slices.Clone(h), func(tr fsm.Transition) bool { return tr.Reason != fsm.ReasonMigrated })
		switch last := h[len(h)-1]; {
		case before == after && len(migrated) > 0:
			s.t.Errorf("%s: history %s, want no move marked %s: %s is a state of both versions", n, history(h), fsm.ReasonMigrated, before)
		case before != after && (len(migrated) != 1 || last.Reason != fsm.ReasonMigrated || last.From != before || last.To != after):
			s.t.Errorf("%s: history %s, want one move %s→%s marked %s, last", n, history(h), before, after, fsm.ReasonMigrated)
		}
	}
}

// history describes a gadget's history.
func history(h []fsm.Transition) string {
	var s []string
	for _, tr := range h {
		s = append(s, fmt.Sprintf("%s→%s (%s)", tr.From, tr.To, tr.Reason))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// checkNoOlderAfterNewer fails the test for every write of version 1 to a
// gadget after version 2 wrote graph version 2 into it.
func (s *scenario) checkNoOlderAfterNewer() {
	s.t.Helper()
	if late := s.rec.olderAfterNewer(); len(late) > 0 {
		s.t.Errorf("version 1 wrote %d times to gadgets that version 2 had written: %s", len(late), first(late, 10))
	}
}

// checkLeftAlone fails the test unless process p, since since, told of
// each of the gadgets named want once, by an event with reason
// NewerVersion, a log line and its counter, and of no other gadget, and
// wrote none of them.
func (s *scenario) checkLeftAlone(p *process, since time.Time, want []string) {
	s.t.Helper()
	told := s.rec.told(p.name, fsm.ReasonNewerVersion, since)
	if got := slices.Sorted(maps.Keys(told)); !slices.Equal(got, want) {
		s.t.Errorf("%s told by events %s that it left %v, want exactly %v", p.name, fsm.ReasonNewerVersion, got, want)
	}
	for _, n := range want {
		if told[n] > 1 {
			s.t.Errorf("%s wrote the event %s of %s %d times, want once", p.name, fsm.ReasonNewerVersion, n, told[n])
		}
		if lines := p.linesWith(leaveWord, `"object"="`+s.env.Namespace+"/"+n+`"`); lines != 1 {
			s.t.Errorf("%s logged %d times that it leaves %s to a newer version, want once", p.name, lines, n)
		}
	}
	left, err := p.metric("kfsm_newer_objects_left_total", "machine", machine)
	if err != nil {
		s.t.Fatal(err)
	}
	if int(left) != len(want) {
		s.t.Errorf("%s's kfsm_newer_objects_left_total is %v, want %d", p.name, left, len(want))
	}
	if got := s.events(fsm.ReasonNewerVersion); !maps.Equal(got, ones(want)) {
		s.t.Errorf("the namespace holds the Warning events %s %v, by gadget and count, want once each of %v", fsm.ReasonNewerVersion, got, want)
	}
	var wrote []string
	for _, c := range s.rec.gadgetWrites(p.name, since) {
		if slices.Contains(want, c.Gadget) {
			wrote = append(wrote, c.String())
		}
	}
	if len(wrote) > 0 {
		s.t.Errorf("%s wrote %d times to gadgets that it should leave alone: %s", p.name, len(wrote), first(wrote, 10))
	}
}

// events counts the Warning events with reason in the namespace, by the
// gadget they regard, their series included.
func (s *scenario) events(reason string) map[string]int {
	s.t.Helper()
	var l eventsv1.EventList
	if err := s.env.Client.List(s.t.Context(), &l, client.InNamespace(s.env.Namespace)); err != nil {
		s.t.Fatal(err)
	}
	out := map[string]int{}
	for _, ev := range l.Items {
		if ev.Reason != reason || ev.Type != corev1.EventTypeWarning || ev.Regarding.Kind != "Gadget" {
			continue
		}
		out[ev.Regarding.Name]++
		if ev.Series != nil {
			out[ev.Regarding.Name] += int(ev.Series.Count) - 1
		}
	}
	return out
}

// ones counts each of names once.
func ones(names []string) map[string]int {
	out := map[string]int{}
	for _, n := range names {
		out[n] = 1
	}
	return out
}

// awaitTold waits until process told of each of the gadgets named want
// that it leaves them alone.
func (s *scenario) awaitTold(process string, since time.Time, want []string) {
	s.t.Helper()
	eventually(s.t, within, process+" to leave the gadgets of version 2 alone", func() (bool, string) {
		told := s.rec.told(process, fsm.ReasonNewerVersion, since)
		var not []string
		for _, n := range want {
			if told[n] == 0 {
				not = append(not, n)
			}
		}
		return len(not) == 0, fmt.Sprintf("%d gadgets without an event %s, such as %s", len(not), fsm.ReasonNewerVersion, first(not, 5))
	})
}

// first joins up to n of s.
func first(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, "; ")
	}
	return strings.Join(s[:n], "; ") + fmt.Sprintf("; and %d more", len(s)-n)
}

// testSharded: replica a of version 1 holds every slot; b of version 2
// joins and takes every slot, a standing aside, and migrates every
// gadget. SIGTERM stops b: a holds every slot again, and leaves every
// gadget alone. b joins again and takes every slot; SIGTERM stops a.
func testSharded(t *testing.T, bin string) {
	const gadgets = 40
	s := newScenario(t, bin, "sharded", false)
	a := s.start("a", 1)
	s.share(a)
	s.create(gadgets)
	s.restInVersionOne()

	t.Log("b of version 2 joins: it takes every slot, a stands aside, and b migrates every gadget")
	b := s.start("b", 2)
	s.holdAll(b, a)
	gs := s.inVersionTwo()
	s.checkMigrated(gs)
	names := slices.Sorted(maps.Keys(gs))

	t.Log("SIGTERM b: a takes every slot, and leaves every gadget alone")
	termB := b.stop()
	s.share(a)
	s.awaitTold("a", termB, names)
	time.Sleep(4 * tick)
	s.checkLeftAlone(a, termB, names)

	t.Log("b of version 2 joins again and takes every slot; SIGTERM a")
	b = s.start("b", 2)
	s.holdAll(b, a)
	a.stop()
	s.share(b)
	s.checkMigrated(s.inVersionTwo())
	s.checkNoOlderAfterNewer()
	s.rec.CheckAgents("rollout-operator")
	b.stop()
}

// testLeader: a of version 1 leads, b of version 2 takes over and
// migrates every gadget, then a leads again and leaves them alone.
// Unchecked, a cannot tell that version 2 wrote the gadgets: it acts on
// them, and the recorder sees its writes.
func testLeader(t *testing.T, bin string, unchecked bool) {
	const gadgets = 16
	s := newScenario(t, bin, "leader", unchecked)
	a := s.start("a", 1)
	s.rec.acquired("a", time.Time{})
	s.create(gadgets)
	s.restInVersionOne()

	t.Log("b of version 2 stands by; SIGTERM a: b leads and migrates every gadget")
	b := s.start("b", 2)
	s.rec.readLease("b", lease, time.Time{}, within)
	termA := a.stop()
	s.rec.acquired("b", termA)
	gs := s.inVersionTwo()
	s.checkMigrated(gs)
	names := slices.Sorted(maps.Keys(gs))

	t.Log("a of version 1 comes back and stands by; SIGTERM b: a leads again")
	back := time.Now()
	a = s.start("a", 1)
	s.rec.readLease("a", lease, back, within)
	termB := b.stop()
	took := s.rec.acquired("a", termB)
	before := s.gadgets()
	if unchecked {
		eventually(t, within, "the unchecked a to write a gadget", func() (bool, string) {
			return len(s.rec.gadgetWrites("a", took.At)) > 0, ""
		})
		late := s.rec.olderAfterNewer()
		t.Logf("unchecked, a wrote %d times to gadgets that version 2 had written, such as %s", len(late), first(late, 3))
		if len(late) == 0 {
			t.Errorf("unchecked, a wrote no gadget that version 2 had written; the recorder should have seen its writes")
		}
		return
	}
	s.awaitTold("a", took.At, names)
	time.Sleep(4 * tick)
	s.checkLeftAlone(a, took.At, names)
	if w := s.rec.gadgetWrites("a", back); len(w) > 0 {
		t.Errorf("a wrote %d times to gadgets after it came back: %s", len(w), first(describe(w), 10))
	}
	after := s.inVersionTwo()
	for _, n := range names {
		if was, is := before[n], after[n]; is.ResourceVersion != was.ResourceVersion {
			t.Errorf("%s changed while a led, from resourceVersion %s to %s: now in %s, count %d, note %q", n,
				was.ResourceVersion, is.ResourceVersion, is.Status.State, is.Status.Count, is.Status.Note)
		}
	}
	s.checkNoOlderAfterNewer()
	s.rec.CheckAgents("rollout-operator")
	a.stop()
}

// describe describes calls.
func describe(calls []call) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.String())
	}
	return out
}
