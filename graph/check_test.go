package graph

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// job finishes, in Succeeded or Failed, but a parked job never does.
func job() *Graph {
	return &Graph{Name: "job", States: []StateSpec{
		{Name: "Queued", Initial: true, Exits: []State{"Running"}},
		{Name: "Running", Exits: []State{"Succeeded", "Failed", "Parked"}},
		{Name: "Parked", Exits: []State{"Unparked"}},
		{Name: "Unparked", Exits: []State{"Parked"}},
		{Name: "Succeeded", Final: true},
		{Name: "Failed", Final: true},
	}}
}

// probe has no final state on its live side, and a lost probe is moved on
// by its timeouts for ever, with no state where it could rest.
func probe() *Graph {
	return &Graph{Name: "probe", States: []StateSpec{
		{Name: "Pending", Initial: true, Exits: []State{"Probing"}},
		{Name: "Probing", Exits: []State{"Ready"}, Timeout: &Timeout{After: 5 * time.Minute, To: "Lost"}},
		{Name: "Ready", Exits: []State{"Probing"}},
		{Name: "Lost", Exits: []State{"Searching"}, Timeout: &Timeout{After: 10 * time.Minute, To: "Searching"}},
		{Name: "Searching", Exits: []State{"Lost"}, Timeout: &Timeout{After: time.Minute, To: "Lost"}},
		{Name: "Releasing", OnDelete: true, Exits: []State{"Released"}},
		{Name: "Released", Final: true},
	}}
}

// volume's deletion path can reach a final state, as Validate asks, but
// not from Detaching, which it can reach too.
func volume() *Graph {
	return &Graph{Name: "volume", States: []StateSpec{
		{Name: "Active", Initial: true, Exits: []State{"Idle"}},
		{Name: "Idle", Exits: []State{"Active"}},
		{Name: "Draining", OnDelete: true, Exits: []State{"Detaching", "Removed"}},
		{Name: "Detaching", Exits: []State{"Orphaned"}},
		{Name: "Orphaned", Exits: []State{"Detaching"}, Retries: &Retries{Limit: 3}},
		{Name: "Removed", Final: true},
	}}
}

// syncer can rest in Synced, but its timeout and its retries send it round
// Syncing and Backoff by themselves, and its deletion path can go round
// Cleanup and Unmounting.
func syncer() *Graph {
	return &Graph{Name: "sync", States: []StateSpec{
		{Name: "Start", Initial: true, Exits: []State{"Syncing"}},
		{Name: "Syncing", Exits: []State{"Synced"}, Timeout: &Timeout{After: 5 * time.Minute, To: "Backoff"}},
		{Name: "Backoff", Exits: []State{"Synced"}, Retries: &Retries{Limit: 3, To: "Syncing"}},
		{Name: "Synced", Exits: []State{"Syncing"}},
		{Name: "Cleanup", OnDelete: true, Exits: []State{"Unmounting", "Gone"}},
		{Name: "Unmounting", Exits: []State{"Cleanup"}},
		{Name: "Gone", Final: true},
	}}
}

// checkCase is a graph, the goals to check it for and the findings of
// Check, whose Detail and Steps are not compared.
type checkCase struct {
	reason string
	graph  *Graph
	goals  []State
	want   []Finding
}

func checkCases() map[string]checkCase {
	return map[string]checkCase{
		"TrapThatNeverFinishes": {
			reason: "job can finish, so a closed set of states without a final one is a trap, though Done could hold a job there",
			graph:  job(),
			want: []Finding{{Problem: Problem{Code: Trap, States: []State{"Parked", "Unparked"}},
				Path: []State{"Queued", "Running", "Parked"}, Loop: []State{"Parked", "Unparked"}}},
		},
		"TrapThatNeverRests": {
			reason: "probe has no final state on its live side; Lost and Searching have timeouts and lead nowhere else, and their cycle of timeouts is the trap's loop, not a second finding",
			graph:  probe(),
			want: []Finding{{Problem: Problem{Code: Trap, States: []State{"Lost", "Searching"}},
				Path: []State{"Pending", "Probing", "Lost"}, Loop: []State{"Lost", "Searching"}}},
		},
		"DeletionPathThatNeverEnds": {
			reason: "Removed can be reached from Draining, but not from Detaching; the cycle in the trap is not reported again",
			graph:  volume(),
			want: []Finding{{Problem: Problem{Code: DeletionTrap, States: []State{"Detaching", "Orphaned"}}, Deleting: true,
				Path: []State{"Draining", "Detaching"}, Loop: []State{"Detaching", "Orphaned"}}},
		},
		"UnboundedCycles": {
			reason: "a cycle of a timeout and a retries edge, then a cycle of exits on the deletion path that no timer leaves",
			graph:  syncer(),
			want: []Finding{
				{Problem: Problem{Code: UnboundedCycle, States: []State{"Syncing", "Backoff"}},
					Path: []State{"Start", "Syncing"}, Loop: []State{"Syncing", "Backoff"}},
				{Problem: Problem{Code: UnboundedCycle, States: []State{"Cleanup", "Unmounting"}}, Deleting: true,
					Path: []State{"Cleanup"}, Loop: []State{"Cleanup", "Unmounting"}},
			},
		},
		"DeletionCycleThatATimeoutEnds": {
			reason: "a timeout out of the cycle ends it without any change of the object",
			graph: &Graph{Name: "unmount", States: []StateSpec{
				{Name: "Mounted", Initial: true, Exits: []State{"Mounted"}},
				{Name: "Cleanup", OnDelete: true, Exits: []State{"Unmounting", "Gone"}},
				{Name: "Unmounting", Exits: []State{"Cleanup"}, Timeout: &Timeout{After: time.Hour, To: "Gone"}},
				{Name: "Gone", Final: true},
			}},
		},
		"TimerCycleEnteredOnlyByDeletion": {
			reason: "the walk to a cycle that only the deletion path reaches starts on delete",
			graph: &Graph{Name: "drain", States: []StateSpec{
				{Name: "Up", Initial: true, Exits: []State{"Up"}},
				{Name: "Draining", OnDelete: true, Exits: []State{"Flushing", "Gone"}},
				{Name: "Flushing", Exits: []State{"Gone"}, Timeout: &Timeout{After: time.Minute, To: "Waiting"}},
				{Name: "Waiting", Exits: []State{"Gone"}, Retries: &Retries{Limit: 2, To: "Flushing"}},
				{Name: "Gone", Final: true},
			}},
			want: []Finding{{Problem: Problem{Code: UnboundedCycle, States: []State{"Flushing", "Waiting"}}, Deleting: true,
				Path: []State{"Draining", "Flushing"}, Loop: []State{"Flushing", "Waiting"}}},
		},
		"GoalUnreachable": {
			reason: "a stopping database cannot be brought back to Servicing; End, final, is no place to ask for a goal",
			graph:  database(),
			goals:  []State{"Servicing", "End", "Servicing"},
			want: []Finding{{Goal: "Servicing", Problem: Problem{Code: GoalUnreachable, States: []State{"Stopping"}},
				Path: []State{"Start", "Running", "Stopping"}}},
		},
		"TimeoutIsNoWayToAGoal": {
			reason: "kfsm walks to a goal through exits: Lost is reached only by a timeout and a retries edge",
			graph:  moose(),
			goals:  []State{"Lost"},
			want: []Finding{{Goal: "Lost", Problem: Problem{Code: GoalUnreachable, States: []State{"Tagged", "Roaming", "Eating", "Sleeping"}},
				Path: []State{"Tagged"}}},
		},
		"UndeclaredGoal": {
			reason: "a goal that is no state cannot be reached from anywhere",
			graph:  moose(),
			goals:  []State{"Grazing"},
			want:   []Finding{{Goal: "Grazing", Problem: Problem{Code: GoalUnreachable, States: []State{"Grazing"}}}},
		},
		"Moose":   {reason: "a cycle of exits on the live side is the machine at work", graph: moose(), goals: []State{"Roaming", "Sleeping"}},
		"Webapp":  {reason: "a pipeline that ends", graph: webapp()},
		"Door":    {reason: "a door that rests open or closed and is removed when deleted", graph: door()},
		"NoGraph": {reason: "a graph without states has nothing to check", graph: &Graph{Name: "empty"}},
	}
}

func TestCheckFindsWhatGetsStuck(t *testing.T) {
	for name, c := range checkCases() {
		t.Run(name, func(t *testing.T) {
			if err := c.graph.Validate(); err != nil && name != "GoalUnreachable" && name != "NoGraph" {
				t.Fatalf("the case's graph is not valid: %v", err)
			}
			got := c.graph.Check(c.goals...)
			ignore := cmp.Options{cmpopts.IgnoreFields(Problem{}, "Detail"), cmpopts.IgnoreFields(Finding{}, "Steps"), cmpopts.EquateEmpty()}
			if diff := cmp.Diff(c.want, got, ignore); diff != "" {
				t.Errorf("%s\nCheck(%q) (-want +got):\n%s", c.reason, c.goals, diff)
			}
			for _, f := range got {
				checkSteps(t, c.graph, f)
			}
		})
	}
}

// door rests Closed or Open; deleted, it is removed at once or after a
// timeout.
func door() *Graph {
	return &Graph{Name: "door", States: []StateSpec{
		{Name: "Closed", Initial: true, Exits: []State{"Open"}},
		{Name: "Open", Exits: []State{"Closed"}, Timeout: &Timeout{After: time.Minute, To: "Closed"}},
		{Name: "Removing", OnDelete: true, Exits: []State{"Removed"}, Timeout: &Timeout{After: time.Hour, To: "Removed"}},
		{Name: "Removed", Final: true},
	}}
}

// checkSteps fails unless f's steps are declared edges that walk its Path
// and then its Loop, back to the Loop's first state.
func checkSteps(t *testing.T, g *Graph, f Finding) {
	t.Helper()
	walk := slices.Clone(f.Path)
	if len(f.Loop) > 0 {
		walk = append(walk, append(f.Loop[1:], f.Loop[0])...)
	}
	if len(f.Path) == 0 {
		walk = nil
	}
	if len(f.Steps) != max(len(walk)-1, 0) {
		t.Fatalf("%s: %d steps for the walk %q", f.Code, len(f.Steps), walk)
	}
	for i, e := range f.Steps {
		if e.From != walk[i] || e.To != walk[i+1] || !slices.Contains(g.Edges(), e) {
			t.Errorf("%s: step %d is %+v, not a declared edge from %s to %s", f.Code, i+1, e, walk[i], walk[i+1])
		}
	}
}

func TestCheckWalksTimerCyclesByTheirTimers(t *testing.T) {
	got := syncer().Check()[0].Steps
	want := []Edge{
		{From: "Start", To: "Syncing", Kind: Exit, Priority: 1},
		{From: "Syncing", To: "Backoff", Kind: TimeoutExit, After: 5 * time.Minute},
		{From: "Backoff", To: "Syncing", Kind: RetriesExit, Limit: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the steps of sync's cycle of timers (-want +got):\n%s", diff)
	}
}

func TestFindingsSayWhatIsWrong(t *testing.T) {
	cases := map[string]struct {
		graph      *Graph
		goals      []State
		walk       string
		detailHas  []string
		detailLack []string
	}{
		"TrapThatNeverFinishes": {
			graph: job(), walk: "Queued -> Running -> Parked, then for ever: Parked -> Unparked -> Parked",
			detailHas: []string{"states Parked, Unparked are a trap", "in Succeeded or Failed", "never does"},
		},
		"TrapThatNeverRests": {
			graph: probe(), walk: "Pending -> Probing -> Lost, then for ever: Lost -> Searching -> Lost",
			detailHas: []string{"states Lost, Searching are a trap", "never rests", "each has a timeout"},
		},
		"DeletionTrap": {
			graph: volume(), walk: "on delete -> Draining -> Detaching, then for ever: Detaching -> Orphaned -> Detaching",
			detailHas: []string{"Detaching, Orphaned", "finalizer", "never be removed"},
		},
		"CycleOfTimers": {
			graph: syncer(), walk: "Start -> Syncing, then for ever: Syncing -> Backoff -> Syncing",
			detailHas: []string{"Syncing -> Backoff -> Syncing", "timeout or retries edge"}, detailLack: []string{"deletion"},
		},
		"Goal": {
			graph: database(), goals: []State{"Servicing"}, walk: "Start -> Running -> Stopping",
			detailHas: []string{"goal Servicing", "from Stopping", "GoalUnreachable"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := c.graph.Check(c.goals...)[0]
			if got := f.Walk(); got != c.walk {
				t.Errorf("Walk() = %q, want %q", got, c.walk)
			}
			for _, s := range c.detailHas {
				if !strings.Contains(f.Detail, s) {
					t.Errorf("Detail %q lacks %q", f.Detail, s)
				}
			}
			for _, s := range c.detailLack {
				if strings.Contains(f.Detail, s) {
					t.Errorf("Detail %q has %q", f.Detail, s)
				}
			}
		})
	}
}

// The examples' graphs, as their lock files keep them, have nothing that
// gets stuck; nor has the database's when asked for the goal End.
func TestExamplesGraphsAreClean(t *testing.T) {
	locks, err := filepath.Glob(filepath.Join("..", "examples", "*", "*.graph.lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) < 4 {
		t.Fatalf("found the lock files %q, want the four examples'", locks)
	}
	for _, file := range locks {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ParseLock(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		g := l.Graphs[slices.Max(slices.Collect(maps.Keys(l.Graphs)))]
		var goals []State
		if g.Name == "database" {
			goals = []State{"End"}
		}
		start := time.Now()
		if f := g.Check(goals...); len(f) > 0 {
			t.Errorf("%s: Check() = %+v", file, f)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: Check took %v", file, d)
		}
	}
}

func TestCheckIsFastOnADenseDeletionPath(t *testing.T) {
	// Twelve states that all lead to each other on the deletion path have
	// hundreds of millions of elementary cycles; Check examines a bounded
	// number of them.
	g := &Graph{Name: "dense", States: []StateSpec{{Name: "Live", Initial: true, Exits: []State{"Live"}}}}
	var names []State
	for i := range 12 {
		names = append(names, State(string(rune('A'+i))))
	}
	for i, s := range names {
		g.States = append(g.States, StateSpec{Name: s, OnDelete: i == 0, Exits: append(slices.Clone(names), "End")})
	}
	g.States = append(g.States, StateSpec{Name: "End", Final: true})
	start := time.Now()
	found := g.Check()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Check took %v", d)
	}
	if len(found) == 0 || len(found) > maxCycles {
		t.Errorf("Check found %d cycles, want some and at most %d", len(found), maxCycles)
	}
}
