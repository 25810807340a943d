package graph

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func doorGraph(version int, states ...State) *Graph {
	g := &Graph{Name: "door", Mode: Lifecycle, Version: version}
	for i, s := range states {
		spec := StateSpec{Name: s, Initial: i == 0, Final: i == len(states)-1}
		if i+1 < len(states) {
			spec.Exits = []State{states[i+1]}
		}
		g.States = append(g.States, spec)
	}
	return g
}

// gone strands the states of an earlier graph that g lacks, except those
// that moved names.
func gone(g *Graph, moved ...State) func(*Graph) []State {
	return func(earlier *Graph) []State {
		var out []State
		for _, s := range earlier.States {
			if _, ok := g.Lookup(s.Name); !ok && !slices.Contains(moved, s.Name) {
				out = append(out, s.Name)
			}
		}
		return out
	}
}

func TestALockRefusesAGraphThatStrandsAReleasedState(t *testing.T) {
	l, err := ParseLock(nil)
	if err != nil {
		t.Fatal(err)
	}
	v1 := doorGraph(0, "Closed", "Open")
	if err := l.Update(v1, gone(v1)); err != nil {
		t.Fatalf("the first graph: %v", err)
	}

	renamed := doorGraph(0, "Shut", "Open")
	err = l.Update(renamed, gone(renamed))
	var serr *StrandingError
	if !errors.As(err, &serr) || !strings.Contains(err.Error(), "state Closed of version 1") || serr.Next != 2 ||
		!strings.Contains(err.Error(), `Machine.Version(2, fsm.Rename("Closed", ...))`) {
		t.Fatalf("Update(renamed without a migration) = %v, want the stranded Closed and the migration into version 2 to declare", err)
	}
	if l.Graphs[1] != v1 {
		t.Error("a refused update changed the lock")
	}

	v2 := doorGraph(2, "Shut", "Open")
	if err := l.Update(v2, gone(v2, "Closed")); err != nil {
		t.Fatalf("version 2 with its migration: %v", err)
	}
	data, err := l.JSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseLock(data)
	if err != nil {
		t.Fatalf("reading back %s: %v", data, err)
	}
	if back.Machine != "door" || len(back.Graphs) != 2 || back.Graphs[2].Version != 2 || back.Graphs[1].States[0].Name != "Closed" {
		t.Errorf("read back %+v from\n%s", back, data)
	}
	again, _ := back.JSON()
	if diff := cmp.Diff(string(data), string(again)); diff != "" {
		t.Errorf("the lock does not write back as it was read (-first +second):\n%s", diff)
	}
	// The migration dropped later: version 1's Closed is stranded again.
	if err := back.Update(v2, gone(v2)); !errors.As(err, &serr) {
		t.Errorf("Update after the migration was dropped = %v, want a StrandingError", err)
	}
	if err := back.Update(v1, gone(v1)); err == nil || !strings.Contains(err.Error(), "version 2 was released") {
		t.Errorf("going back to version 1 = %v, want a refusal", err)
	}
}

// A lock file is written where the machine's package is, refuses a graph
// that strands a locked state and stays as it was; its earlier graphs are
// what a published graph carries.
func TestALockFileKeepsTheEarlierGraphs(t *testing.T) {
	dir := t.TempDir()
	v1 := doorGraph(1, "Closed", "Open")
	if _, err := UpdateLockFile(dir, v1, gone(v1)); err != nil {
		t.Fatal(err)
	}
	v2 := doorGraph(2, "Shut", "Open")
	written, err := os.ReadFile(filepath.Join(dir, "door.graph.lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := UpdateLockFile(dir, v2, gone(v2)); err == nil {
		t.Fatal("version 2 stranded Closed and the lock file took it")
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "door.graph.lock.json")); string(now) != string(written) {
		t.Error("a refused update changed the lock file")
	}
	l, err := UpdateLockFile(dir, v2, gone(v2, "Closed"))
	if err != nil {
		t.Fatal(err)
	}
	earlier, err := l.Earlier(2)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ParseJSON(earlier["1"])
	if len(earlier) != 1 || err != nil || g.States[0].Name != "Closed" || strings.ContainsAny(string(earlier["1"]), " \n") {
		t.Errorf("Earlier(2) = %s (%v), want version 1's graph alone, compact", earlier, err)
	}
	if none, _ := l.Earlier(1); none != nil {
		t.Errorf("Earlier(1) = %s, want none", none)
	}
}

// An unreleased lock, such as a new project's, keeps the graph that was
// generated last, whatever it strands, until the project releases it by
// deleting the mark; then the lock guards the graph as released.
func TestAnUnreleasedLockTakesAnyGraphUntilItIsReleased(t *testing.T) {
	l, err := ParseLock([]byte(`{"machine": "door", "unreleased": true, "graphs": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	sample := doorGraph(0, "Closed", "Open")
	if err := l.Update(sample, gone(sample)); err != nil {
		t.Fatalf("the sample graph: %v", err)
	}
	own := doorGraph(0, "Shut", "Ajar", "Open")
	if err := l.Update(own, gone(own)); err != nil {
		t.Fatalf("a graph that replaces the unreleased sample: %v", err)
	}
	if !l.Unreleased || len(l.Graphs) != 1 || l.Graphs[1] != own {
		t.Fatalf("the lock after the replacement: %+v, want version 1's graph replaced, still unreleased", l)
	}
	data, err := l.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "{\n  \"machine\": \"door\",\n  \"unreleased\": true,\n  \"graphs\": {") {
		t.Errorf("the lock does not say on a line of its own that it is unreleased:\n%s", data)
	}

	// Released: the line deleted, as a project does.
	released, err := ParseLock([]byte(strings.Replace(string(data), "  \"unreleased\": true,\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if released.Unreleased {
		t.Fatal("the lock without its mark is still unreleased")
	}
	if again, _ := released.JSON(); strings.Contains(string(again), "unreleased") {
		t.Errorf("a released lock writes the mark:\n%s", again)
	}
	opened := doorGraph(0, "Open")
	err = released.Update(opened, gone(opened))
	var serr *StrandingError
	if !errors.As(err, &serr) || !strings.Contains(err.Error(), "state Shut of version 1, state Ajar of version 1") {
		t.Fatalf("Update(a graph that strands the released Shut and Ajar) = %v, want a StrandingError", err)
	}
	if !strings.Contains(err.Error(), `if no release has shipped version 1, mark the lock "unreleased": true`) {
		t.Errorf("the error does not say what to do if version 1 was never released: %v", err)
	}

	// Unreleased again, with version 2 in the making: version 1 is
	// released and guarded, and the unreleased graph is version 2's.
	v2 := doorGraph(2, "Shut", "Ajar", "Open")
	if err := released.Update(v2, gone(v2)); err != nil {
		t.Fatal(err)
	}
	released.Unreleased = true
	v2 = doorGraph(2, "Shut", "Open")
	if err := released.Update(v2, gone(v2, "Ajar")); err != nil {
		t.Fatalf("version 2 with a migration from version 1: %v", err)
	}
	if len(released.Graphs) != 2 || released.Graphs[2] != v2 {
		t.Errorf("the lock holds %v, want versions 1 and 2, version 2's replaced", slices.Sorted(maps.Keys(released.Graphs)))
	}
	err = released.Update(v2, gone(v2))
	if !errors.As(err, &serr) || !strings.Contains(err.Error(), "state Ajar of version 1") {
		t.Fatalf("Update(version 2 without its migration) = %v, want version 1's Ajar stranded", err)
	}
	if strings.Contains(err.Error(), "unreleased") {
		t.Errorf("the error offers to unrelease version 1, which an earlier version than the lock's newest is not: %v", err)
	}
	// A version after the unreleased one replaces it: no release shipped it.
	v3 := doorGraph(3, "Shut", "Open")
	if err := released.Update(v3, gone(v3, "Ajar")); err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(released.Graphs)); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("the lock holds versions %v, want 1 and 3", got)
	}
}
