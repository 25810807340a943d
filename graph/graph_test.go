package graph

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// moose is a lifecycle graph with a cycle, a timeout, retries with and
// without an edge, priorities and a deletion path.
func moose() *Graph {
	return &Graph{
		Name: "moose",
		Mode: Lifecycle,
		States: []StateSpec{
			{Name: "Tagged", Initial: true, Exits: []State{"Roaming"}},
			{Name: "Roaming", Exits: []State{"Eating", "Sleeping"}, Timeout: &Timeout{After: 30 * time.Minute, To: "Lost"}},
			{Name: "Eating", Exits: []State{"Sleeping"}, Retries: &Retries{Limit: 3, To: "Lost"}},
			{Name: "Sleeping", Exits: []State{"Roaming"}, Retries: &Retries{Limit: 5}},
			{Name: "Lost", Final: true},
			{Name: "Releasing", OnDelete: true, Exits: []State{"Released"}, Timeout: &Timeout{After: 2 * time.Hour, To: "Released"}},
			{Name: "Released", Final: true},
		},
	}
}

// webapp is a pipeline graph (a DAG) without a deletion path.
func webapp() *Graph {
	return &Graph{
		Name: "webapp",
		Mode: Pipeline,
		States: []StateSpec{
			{Name: "Validate", Initial: true, Exits: []State{"ConfigMap"}},
			{Name: "ConfigMap", Exits: []State{"Deployment"}},
			{Name: "Deployment", Exits: []State{"Service", "Available"}},
			{Name: "Service", Exits: []State{"Available"}},
			{Name: "Available", Exits: []State{"Ready"}},
			{Name: "Ready", Final: true},
		},
	}
}

func TestSoundGraphsValidate(t *testing.T) {
	for name, g := range map[string]*Graph{"Moose": moose(), "Webapp": webapp()} {
		if err := g.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	cases := map[string]struct {
		reason string
		graph  Graph
		want   []Problem // Code and States; Detail is not compared
	}{
		"MissingInitial": {
			reason: "a graph needs somewhere to start",
			graph:  Graph{States: []StateSpec{{Name: "A", Final: true}}},
			want:   []Problem{{Code: MissingInitial}},
		},
		"DuplicateInitial": {
			reason: "only one state can be where objects start",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"C"}},
				{Name: "B", Initial: true, Exits: []State{"C"}},
				{Name: "C", Final: true},
			}},
			want: []Problem{{Code: DuplicateInitial, States: []State{"A", "B"}}},
		},
		"DuplicateState": {
			reason: "a name must mean one state",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B"}},
				{Name: "B", Final: true},
				{Name: "B", Final: true},
			}},
			want: []Problem{{Code: DuplicateState, States: []State{"B"}}},
		},
		"EmptyName": {
			reason: "a state without a name cannot be persisted",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Final: true},
				{Name: "", Final: true},
			}},
			want: []Problem{{Code: EmptyName}},
		},
		"UnknownTargets": {
			reason: "every kind of edge must lead to a declared state",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B", "Nowhere"}, Timeout: &Timeout{After: time.Second, To: "Later"}, Retries: &Retries{Limit: 2, To: "Elsewhere"}},
				{Name: "B", Final: true},
			}},
			want: []Problem{
				{Code: UnknownTarget, States: []State{"A", "Nowhere"}},
				{Code: UnknownTarget, States: []State{"A", "Later"}},
				{Code: UnknownTarget, States: []State{"A", "Elsewhere"}},
			},
		},
		"DuplicateExit": {
			reason: "an exit listed twice has an ambiguous priority",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B", "B"}},
				{Name: "B", Final: true},
			}},
			want: []Problem{{Code: DuplicateExit, States: []State{"A", "B"}}},
		},
		"Unreachable": {
			reason: "a state nothing leads to is dead code",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B"}},
				{Name: "B", Final: true},
				{Name: "Island", Exits: []State{"B"}},
			}},
			want: []Problem{{Code: Unreachable, States: []State{"Island"}}},
		},
		"NoExit": {
			reason: "a non-final state without exits traps objects",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"Trap"}},
				{Name: "Trap"},
			}},
			want: []Problem{{Code: NoExit, States: []State{"Trap"}}},
		},
		"RetriesWithoutTargetIsNoExit": {
			reason: "a retry limit without a target stalls; it does not leave the state",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Retries: &Retries{Limit: 3}},
			}},
			want: []Problem{{Code: NoExit, States: []State{"A"}}},
		},
		"FinalWithExits": {
			reason: "a final state ends the walk",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B"}},
				{Name: "B", Final: true, Exits: []State{"A"}},
			}},
			want: []Problem{{Code: FinalWithExits, States: []State{"B"}}},
		},
		"BadTimeoutAndRetries": {
			reason: "a timeout must be positive and retries at least one",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B"}, Timeout: &Timeout{To: "B"}, Retries: &Retries{Limit: 0, To: "B"}},
				{Name: "B", Final: true},
			}},
			want: []Problem{{Code: BadTimeout, States: []State{"A"}}, {Code: BadRetries, States: []State{"A"}}},
		},
		"PipelineCycle": {
			reason: "a pipeline restarts from the initial state, so a cycle would never end",
			graph: Graph{Mode: Pipeline, States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B"}},
				{Name: "B", Exits: []State{"C", "D"}},
				{Name: "C", Exits: []State{"A"}},
				{Name: "D", Final: true},
			}},
			want: []Problem{{Code: Cycle, States: []State{"A", "B", "C"}}},
		},
		"PipelineSelfLoop": {
			reason: "a state that leads to itself is a cycle too",
			graph: Graph{Mode: Pipeline, States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"A", "B"}},
				{Name: "B", Final: true},
			}},
			want: []Problem{{Code: Cycle, States: []State{"A"}}},
		},
		"LifecycleCycleIsFine": {
			reason: "lifecycle machines cycle across reconciles",
			graph: Graph{Mode: Lifecycle, States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B"}},
				{Name: "B", Exits: []State{"A"}},
			}},
		},
		"DuplicateOnDelete": {
			reason: "deletion starts in one place",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Final: true},
				{Name: "D1", OnDelete: true, Final: true},
				{Name: "D2", OnDelete: true, Final: true},
			}},
			want: []Problem{{Code: DuplicateOnDelete, States: []State{"D1", "D2"}}},
		},
		"DeletionNeverEnds": {
			reason: "the finalizer is removed only in a final state of the deletion path",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Final: true},
				{Name: "D1", OnDelete: true, Exits: []State{"D2"}},
				{Name: "D2", Exits: []State{"D1"}},
			}},
			want: []Problem{{Code: DeletionNeverEnds, States: []State{"D1"}}},
		},
		"DeletionPathIsReachable": {
			reason: "states reached only from the deletion state are not unreachable",
			graph: Graph{States: []StateSpec{
				{Name: "A", Initial: true, Final: true},
				{Name: "Cleanup", OnDelete: true, Exits: []State{"Gone"}},
				{Name: "Gone", Final: true},
			}},
		},
		"EveryProblemAtOnce": {
			reason: "authors fix a graph in one go when they see all of it",
			graph: Graph{States: []StateSpec{
				{Name: "A", Exits: []State{"X"}},
				{Name: "A", Final: true},
			}},
			want: []Problem{
				{Code: DuplicateState, States: []State{"A"}},
				{Code: MissingInitial},
				{Code: UnknownTarget, States: []State{"A", "X"}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.graph.Validate()
			var got []Problem
			if err != nil {
				var verr *ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("Validate() error is a %T, want *ValidationError", err)
				}
				for _, p := range verr.Problems {
					if p.Detail == "" {
						t.Errorf("problem %s has no detail", p.Code)
					}
					got = append(got, Problem{Code: p.Code, States: p.States})
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nproblems (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestValidationErrorNamesTheStates(t *testing.T) {
	g := Graph{Name: "demo", States: []StateSpec{
		{Name: "Start", Initial: true, Exits: []State{"Missing"}},
	}}
	var verr *ValidationError
	if !errors.As(g.Validate(), &verr) || !verr.Has(UnknownTarget) {
		t.Fatalf("Validate() = %v, want an UnknownTarget problem", g.Validate())
	}
	if got, want := verr.Problems[0].Detail, "state Start has an exit to Missing, which is not declared"; got != want {
		t.Errorf("Detail = %q, want %q", got, want)
	}
}

func TestDeletionPath(t *testing.T) {
	if diff := cmp.Diff([]State{"Releasing", "Released"}, moose().DeletionPath()); diff != "" {
		t.Errorf("DeletionPath() (-want +got):\n%s", diff)
	}
	if got := webapp().DeletionPath(); got != nil {
		t.Errorf("DeletionPath() of a graph without OnDelete = %v, want nil", got)
	}
}

func TestEdges(t *testing.T) {
	want := []Edge{
		{From: "Tagged", To: "Roaming", Kind: Exit, Priority: 1},
		{From: "Roaming", To: "Eating", Kind: Exit, Priority: 1},
		{From: "Roaming", To: "Sleeping", Kind: Exit, Priority: 2},
		{From: "Roaming", To: "Lost", Kind: TimeoutExit, After: 30 * time.Minute},
		{From: "Eating", To: "Sleeping", Kind: Exit, Priority: 1},
		{From: "Eating", To: "Lost", Kind: RetriesExit, Limit: 3},
		{From: "Sleeping", To: "Roaming", Kind: Exit, Priority: 1},
		{From: "Releasing", To: "Released", Kind: Exit, Priority: 1},
		{From: "Releasing", To: "Released", Kind: TimeoutExit, After: 2 * time.Hour},
	}
	if diff := cmp.Diff(want, moose().Edges()); diff != "" {
		t.Errorf("Edges() (-want +got):\n%s", diff)
	}
}

func TestExportsMatchGoldenFiles(t *testing.T) {
	for _, g := range []*Graph{moose(), webapp()} {
		js, err := g.JSON()
		if err != nil {
			t.Fatal(err)
		}
		for ext, got := range map[string][]byte{".dot": []byte(g.DOT()), ".mmd": []byte(g.Mermaid()), ".json": js} {
			path := filepath.Join("testdata", g.Name+ext)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./graph -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s (-golden +got):\n%s", path, diff)
			}
		}
	}
}

func TestJSONIsValidAndComplete(t *testing.T) {
	js, err := moose().JSON()
	if err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		States []struct {
			Name     State `json:"name"`
			Deletion bool  `json:"deletionPath"`
		} `json:"states"`
		Edges []struct{ Kind string } `json:"edges"`
	}
	if err := json.Unmarshal(js, &decoded); err != nil {
		t.Fatal(err)
	}
	if len(decoded.States) != len(moose().States) || len(decoded.Edges) != len(moose().Edges()) {
		t.Errorf("JSON has %d states and %d edges, want %d and %d",
			len(decoded.States), len(decoded.Edges), len(moose().States), len(moose().Edges()))
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		30 * time.Minute:        "30m",
		2 * time.Hour:           "2h",
		90 * time.Minute:        "1h30m",
		1500 * time.Millisecond: "1.5s",
		45 * time.Second:        "45s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// A finding's drawing numbers the steps of its walk and marks its states.
func TestMermaidFindingMatchesGoldenFiles(t *testing.T) {
	for _, g := range []*Graph{job(), volume(), syncer()} {
		var got strings.Builder
		for _, f := range g.Check() {
			got.WriteString(g.MermaidFinding(f))
		}
		matchGolden(t, filepath.Join("testdata", g.Name+".check.mmd"), got.String())
	}
}

// matchGolden fails unless the golden file at path holds got; with
// -update, it writes got there instead.
func matchGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./graph -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-golden +got):\n%s", path, diff)
	}
}
