package fsm_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/graph"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// versionObjects is how many gadgets the migration under a manager
// moves; -versions.objects=1000 makes it a fleet.
var versionObjects = flag.Int("versions.objects", 20, "gadgets that TestUnderManagerANewGraphVersionMigratesObjectsInFlight migrates")

// The states of version 1 of the versions machine, by spec.target.
var versionOneStates = map[int32]fsm.State{1: "Old", 2: "Both", 3: "Gone", 4: "Kept"}

// sorting moves a gadget to the state its target names.
func sorting(states map[int32]fsm.State) fsm.Handler[*gadget] {
	return func(_ context.Context, r *request) fsm.Result { return fsm.Next(states[r.Object.Spec.Target]) }
}

// resting applies the gadget's ledger ConfigMap, the same in both
// versions, and rests.
func resting(ctx context.Context, r *request) fsm.Result {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-ledger"}, Data: map[string]string{"owner": r.Object.Name}}
	if err := r.Apply(ctx, cm); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Wait(0, "Resting")
}

func versionOne() *fsm.Machine[*gadget] {
	return fsm.New[*gadget]("versions", fsm.Lifecycle).
		Initial("Start").
		State("Start", sorting(versionOneStates), fsm.To("Old", "Both", "Gone", "Kept")).
		State("Old", resting, fsm.Final()).State("Both", resting, fsm.Final()).State("Gone", resting, fsm.Final()).State("Kept", resting, fsm.Final()).
		OnDelete("Cleanup").State("Cleanup", nil, fsm.Final()). // prunes the ledger before the gadget goes
		Owns(&corev1.ConfigMap{})
}

// versionTwo renames Old to New, splits Both into Left and Right by the
// gadget's name, removes Gone into Kept and adds Added.
func versionTwo() *fsm.Machine[*gadget] {
	return versionTwoGraph().
		Version(2,
			fsm.Rename("Old", "New"),
			fsm.Split("Both", func(g *gadget) fsm.State {
				if g.Name[len(g.Name)-1]%2 == 0 {
					return "Left"
				}
				return "Right"
			}),
			fsm.Remove("Gone", "Kept"))
}

// versionTwoGraph is version 2's graph, without its migrations.
func versionTwoGraph() *fsm.Machine[*gadget] {
	return fsm.New[*gadget]("versions", fsm.Lifecycle).
		Initial("Start").
		State("Start", sorting(map[int32]fsm.State{1: "New", 2: "Left", 3: "Kept", 4: "Kept", 5: "Added"}), fsm.To("New", "Left", "Right", "Kept", "Added")).
		State("New", resting, fsm.Final()).State("Left", resting, fsm.Final()).State("Right", resting, fsm.Final()).
		State("Kept", resting, fsm.Final()).State("Added", resting, fsm.Final()).
		OnDelete("Cleanup").State("Cleanup", nil, fsm.Final()).
		Owns(&corev1.ConfigMap{})
}

// Objects in every state of version 1, then version 2: each is where
// version 2 says, with its history and its children kept, and none is
// UnknownState.
func TestUnderManagerANewGraphVersionMigratesObjectsInFlight(t *testing.T) {
	e := newEnv(t)
	upgraded := false // read by the machine function, which each process calls
	fsmtest.RunFunc(e.fe, func(*fsmtest.Env) *fsm.Machine[*gadget] {
		if upgraded {
			return versionTwo()
		}
		return versionOne()
	})
	n := *versionObjects
	for i := range n {
		e.gadget(fmt.Sprintf("g-%04d", i), v1alpha1.GadgetSpec{Target: int32(i%4) + 1})
	}
	children := map[string]string{} // gadget → its ledger's UID
	e.fe.Await("every gadget at rest in version 1", func() bool {
		for i := range n {
			g := e.get(fmt.Sprintf("g-%04d", i))
			if len(g.Status.Outputs) != 1 || g.Status.State != versionOneStates[g.Spec.Target] {
				return false
			}
			children[g.Name] = string(g.Status.Outputs[0].UID)
		}
		return true
	})
	upgraded = true
	e.fe.RestartOperator() // as a rolling update does

	want := func(g *gadget) fsm.State {
		switch versionOneStates[g.Spec.Target] {
		case "Old":
			return "New"
		case "Both":
			if g.Name[len(g.Name)-1]%2 == 0 {
				return "Left"
			}
			return "Right"
		case "Gone":
			return "Kept"
		}
		return "Kept"
	}
	e.fe.Await("every gadget migrated", func() bool {
		for i := range n {
			if g := e.get(fmt.Sprintf("g-%04d", i)); g.Status.GraphVersion != 2 || g.Status.State != want(g) {
				return false
			}
		}
		return true
	})
	for i := range n {
		g := e.get(fmt.Sprintf("g-%04d", i))
		if c := condition(g, fsm.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			t.Errorf("%s is Stalled: %s: %s", g.Name, c.Reason, c.Message)
		}
		h := g.Status.History
		before := versionOneStates[g.Spec.Target]
		if len(h) < 2 || h[0].To != "Start" || h[1].To != before {
			t.Errorf("%s: history %+v lost version 1's moves", g.Name, h)
		}
		if before != want(g) && (h[len(h)-1].From != before || h[len(h)-1].To != want(g) || h[len(h)-1].Reason != fsm.ReasonMigrated) {
			t.Errorf("%s: history %+v, want the move %s→%s marked %s last", g.Name, h, before, want(g), fsm.ReasonMigrated)
		}
		out := g.Status.Outputs
		if len(out) != 1 || string(out[0].UID) != children[g.Name] || out[0].State != want(g) {
			t.Errorf("%s: outputs %+v, want its ledger (UID %s) kept, recorded under %s", g.Name, out, children[g.Name], want(g))
		}
		var cm corev1.ConfigMap
		if err := e.direct.Get(t.Context(), e.key(g.Name+"-ledger"), &cm); err != nil || string(cm.UID) != children[g.Name] {
			t.Errorf("%s: its ledger is %s (%v), want the one of version 1, %s: not re-created", g.Name, cm.UID, err, children[g.Name])
		}
	}
}

// A migration moves what an object recorded under a state with it: a
// renamed state that no longer applies a child prunes it when it is done,
// as it would had it applied the child under its new name. (The fleet's
// migration does not show this: its states apply their child again.)
func TestAMigratedStatePrunesTheChildItNoLongerApplies(t *testing.T) {
	e := newEnv(t)
	upgraded := false // read by the machine function, which each process calls
	fsmtest.RunFunc(e.fe, func(*fsmtest.Env) *fsm.Machine[*gadget] {
		m := fsm.New[*gadget]("renamed", fsm.Lifecycle)
		if !upgraded {
			return m.Initial("Old").State("Old", resting, fsm.Final()).Owns(&corev1.ConfigMap{})
		}
		done := func(context.Context, *request) fsm.Result { return fsm.Done() }
		return m.Initial("New").State("New", done, fsm.Final()).Owns(&corev1.ConfigMap{}).Version(2, fsm.Rename("Old", "New"))
	})
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the ledger recorded under Old", func() bool {
		out := e.get("g").Status.Outputs
		return len(out) == 1 && out[0].State == "Old"
	})
	upgraded = true
	e.fe.RestartOperator()
	e.fe.Await("the gadget migrated to New, and done", func() bool {
		g := e.get("g")
		return g.Status.GraphVersion == 2 && g.Status.State == "New" && g.Status.ObservedGeneration == g.Generation
	})
	e.fe.Await("the ledger pruned", func() bool {
		var cm corev1.ConfigMap
		return apierrors.IsNotFound(e.direct.Get(t.Context(), e.key("g-ledger"), &cm)) && len(e.get("g").Status.Outputs) == 0
	})
}

// A migration moves the records of a state's actions with it: a renamed
// state that leaves without asking for its action drops the record, as
// it would had the action started under its new name.
func TestAMigratedStateDropsTheRecordOfItsActionWhenItLeaves(t *testing.T) {
	e := newEnv(t)
	upgraded := false // read by the machine function, which each process calls
	fsmtest.RunFunc(e.fe, func(*fsmtest.Env) *fsm.Machine[*gadget] {
		m := fsm.New[*gadget]("renamed-action", fsm.Lifecycle)
		if !upgraded {
			return m.Initial("Old").State("Old", func(_ context.Context, r *request) fsm.Result {
				r.Action("work", func(ctx context.Context, _ *fsm.ActionRun) error { <-ctx.Done(); return ctx.Err() })
				return fsm.Wait(0, "Working")
			}, fsm.Final())
		}
		leave := func(context.Context, *request) fsm.Result { return fsm.Next("Later") }
		return m.Initial("New").State("New", leave, fsm.To("Later")).State("Later", done, fsm.Final()).
			Version(2, fsm.Rename("Old", "New"))
	})
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the action recorded under Old", func() bool {
		acts := e.get("g").Status.Actions
		return len(acts) == 1 && acts[0].State == "Old"
	})
	upgraded = true
	e.fe.RestartOperator()
	e.fe.Await("the gadget migrated, and on to Later", func() bool {
		g := e.get("g")
		return g.Status.GraphVersion == 2 && g.Status.State == "Later"
	})
	if acts := e.get("g").Status.Actions; len(acts) != 0 {
		t.Errorf("status.actions is %+v after New was left, want the record of its action dropped", acts)
	}
}

// A pipeline's migration renames the condition of a renamed state: no
// condition is left that names a state the graph no longer has.
func TestAPipelinesMigrationRenamesTheConditionOfARenamedState(t *testing.T) {
	e := newEnv(t)
	upgraded := false // read by the machine function, which each process calls
	fsmtest.RunFunc(e.fe, func(*fsmtest.Env) *fsm.Machine[*gadget] {
		first := fsm.State("Old")
		if upgraded {
			first = "New"
		}
		m := fsm.New[*gadget]("renamed-pipeline", fsm.Pipeline).Initial(first).
			State(first, func(context.Context, *request) fsm.Result { return fsm.Next("Serving") }, fsm.To("Serving")).
			State("Serving", done, fsm.Final())
		if upgraded {
			m.Version(2, fsm.Rename("Old", "New"))
		}
		return m
	})
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("Old passed", func() bool { return condition(e.get("g"), "Old") != nil && ready(e, "g") })
	upgraded = true
	e.fe.RestartOperator()
	e.fe.Await("the gadget migrated", func() bool { return e.get("g").Status.GraphVersion == 2 })
	g := e.get("g")
	if c := condition(g, "Old"); c != nil {
		t.Errorf("condition Old %+v is left after Old was renamed New; conditions %+v", c, g.Status.Conditions)
	}
	if c := condition(g, "New"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("condition New is %+v, want Old's, passed; conditions %+v", c, g.Status.Conditions)
	}
}

// An operator of an older version leaves an object that a newer one
// wrote: no handler, no write, and it says so once for each generation.
func TestUnderManagerAnOlderVersionLeavesANewerObjectAlone(t *testing.T) {
	e := newEnv(t)
	op := fsmtest.Run(e.fe, versionTwo())
	e.gadget("g", v1alpha1.GadgetSpec{Target: 1})
	e.fe.Await("version 2 at rest", func() bool { return e.get("g").Status.State == "New" })
	op.Stop()

	var runs atomic.Int32
	old := versionOne()
	old.Observe(fsm.Observers[*gadget]{Walk: func(context.Context, fsm.Walk) { runs.Add(1) }})
	fsmtest.Run(e.fe, old)
	warned := func(n int) func() bool {
		return func() bool { return occurrences(e.apiEvents(), fsm.ReasonNewerVersion) == n }
	}
	e.fe.Await("the warning", warned(1))
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "touched" }) // a new generation, which version 1 would walk
	e.fe.Await("the warning of the new generation", warned(2))
	time.Sleep(time.Second)
	if n := occurrences(e.apiEvents(), fsm.ReasonNewerVersion); n != 2 {
		t.Errorf("version 1 warned %d times of two generations, want twice", n)
	}
	g := e.get("g")
	if g.Status.State != "New" || g.Status.GraphVersion != 2 || g.Status.ObservedGeneration == g.Generation {
		t.Errorf("version 1 touched the object: state %s, graph version %d, observed generation %d of %d",
			g.Status.State, g.Status.GraphVersion, g.Status.ObservedGeneration, g.Generation)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("version 1 walked the object %d times, want never", n)
	}
}

func TestBuildRefusesAMigrationThatStrandsObjects(t *testing.T) {
	for name, tc := range map[string]struct {
		m    *fsm.Machine[*gadget]
		want string
	}{
		"StillDeclared": {versionOne().Version(2, fsm.Rename("Old", "Kept")), "state Old is still declared"},
		"Undeclared":    {versionTwo().Version(2, fsm.Rename("Older", "Nowhere")), "leads to state Nowhere"},
	} {
		t.Run(name, func(t *testing.T) {
			var verr *graph.ValidationError
			err := tc.m.Build()
			if !errors.As(err, &verr) || !verr.Has(fsm.BadMigration) || !containsDetail(verr, tc.want) {
				t.Errorf("Build() = %v, want %s saying %q", err, fsm.BadMigration, tc.want)
			}
		})
	}
}

func containsDetail(verr *graph.ValidationError, want string) bool {
	return slices.ContainsFunc(verr.Problems, func(p graph.Problem) bool { return strings.Contains(p.Detail, want) })
}

// upgraded holds the namespaces of the tests whose operator runs version
// 2 of the versions machine.
var upgraded sync.Map

// A migration under faults: the operator crashes after every write, those
// of the migration included, or each write fails; every run ends where
// the clean one does.
func TestAMigrationSurvivesFaults(t *testing.T) {
	t.Parallel()
	machine := func(e *fsmtest.Env) *fsm.Machine[*gadget] {
		if _, ok := upgraded.Load(e.Namespace); ok {
			return versionTwo()
		}
		return versionOne()
	}
	fsmtest.Faults(t, machine, func(e *fsmtest.Env) {
		var gs []*gadget
		for i, name := range []string{"old", "both-a", "both-b", "gone", "kept"} {
			g := &gadget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.GadgetSpec{Target: int32(min(i, 3)) + 1}}
			if name == "both-b" {
				g.Spec.Target = 2
			}
			e.Create(g)
			gs = append(gs, g)
		}
		// One Await for all: the order in which the gadgets move differs
		// between runs, where they end may not.
		at := func(what string, want func(*gadget) fsm.State) {
			e.Await(what, func() bool {
				for _, g := range gs {
					if !e.Get(g) || g.Status.State != want(g) {
						return false
					}
				}
				return true
			})
		}
		at("every gadget at rest in version 1", func(g *gadget) fsm.State { return versionOneStates[g.Spec.Target] })
		upgraded.Store(e.Namespace, true)
		e.RestartOperator()
		v2 := map[string]fsm.State{"old": "New", "both-a": "Right", "both-b": "Left", "gone": "Kept", "kept": "Kept"}
		at("every gadget migrated", func(g *gadget) fsm.State { return v2[g.Name] })
		for _, g := range gs {
			e.Delete(g)
			e.AwaitGone(g)
		}
	}, fsmtest.Only(fsmtest.Crash))
}

// A new graph that drops states of the released one strands their
// objects unless a migration moves them.
func TestStrandedNamesTheStatesNoMigrationMoves(t *testing.T) {
	released := versionOne().Graph()
	current := versionTwo().Graph() // version 2, with Old, Both and Gone gone
	for name, tc := range map[string]struct {
		m       *fsm.Machine[*gadget]
		earlier *graph.Graph
		want    []graph.State
	}{
		"NoMigration":    {versionTwoGraph(), released, []graph.State{"Old", "Both", "Gone"}},
		"Migrated":       {versionTwo(), released, nil},
		"Partly":         {versionTwoGraph().Version(2, fsm.Rename("Old", "New")), released, []graph.State{"Both", "Gone"}},
		"Merged":         {versionTwoGraph().Version(2, fsm.Rename("Old", "New"), fsm.Merge("Kept", "Both", "Gone")), released, nil},
		"MergedOne":      {versionTwoGraph().Version(2, fsm.Rename("Old", "New"), fsm.Merge("Kept", "Gone")), released, []graph.State{"Both"}},
		"SameVersion":    {versionTwo(), current, nil},
		"NoVersionAgain": {versionOne(), current, []graph.State{"New", "Left", "Right", "Added"}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.m.Stranded(tc.earlier)); diff != "" {
				t.Errorf("stranded (-want +got):\n%s", diff)
			}
		})
	}
	if current.Version != 2 || released.Version != 0 {
		t.Errorf("graph versions %d and %d, want 2 for version 2 and 0 (the first) for version 1", current.Version, released.Version)
	}
}
