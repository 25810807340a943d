package graph

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// database is OKT's application lifecycle, with a second, longer way to End.
func database() *Graph {
	return &Graph{Name: "database", States: []StateSpec{
		{Name: "Start", Initial: true, Exits: []State{"Running"}},
		{Name: "Running", Exits: []State{"Servicing", "Stopping"}},
		{Name: "Servicing", Exits: []State{"Running", "End"}},
		{Name: "Stopping", Exits: []State{"End"}},
		{Name: "End", Final: true},
		{Name: "Lost", Final: true},
	}}
}

func TestPath(t *testing.T) {
	cases := map[string]struct {
		reason   string
		from, to State
		want     []State
		wantOK   bool
	}{
		"Itself":            {reason: "an object at its goal stays", from: "Running", to: "Running", want: []State{"Running"}, wantOK: true},
		"OneHop":            {reason: "a direct exit is the path", from: "Start", to: "Running", want: []State{"Start", "Running"}, wantOK: true},
		"PriorityBreaksTie": {reason: "Servicing and Stopping both reach End in two; Servicing is declared first", from: "Running", to: "End", want: []State{"Running", "Servicing", "End"}, wantOK: true},
		"Shortest":          {reason: "the shortest walk wins over priority", from: "Start", to: "Stopping", want: []State{"Start", "Running", "Stopping"}, wantOK: true},
		"AcrossACycle":      {reason: "lifecycle graphs reach back", from: "Servicing", to: "Stopping", want: []State{"Servicing", "Running", "Stopping"}, wantOK: true},
		"Unreachable":       {reason: "nothing leads to Lost", from: "Start", to: "Lost"},
		"FromFinal":         {reason: "a final state goes nowhere", from: "End", to: "Running"},
		"UnknownGoal":       {reason: "a goal the graph lacks is unreachable", from: "Start", to: "Nowhere"},
		"UnknownStart":      {reason: "so is a start the graph lacks", from: "Nowhere", to: "End"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := database().Path(tc.from, tc.to)
			if ok != tc.wantOK {
				t.Fatalf("%s: Path() ok = %t, want %t", tc.reason, ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: Path() (-want +got):\n%s", tc.reason, diff)
			}
			if r := database().Reachable(tc.from, tc.to); r != tc.wantOK {
				t.Errorf("Reachable() = %t, want %t", r, tc.wantOK)
			}
		})
	}
}

func TestNextHop(t *testing.T) {
	g := database()
	for _, tc := range []struct {
		from, goal, want State
		ok               bool
	}{
		{"Running", "End", "Servicing", true},
		{"Servicing", "Stopping", "Running", true},
		{"End", "End", "End", true},
		{"Start", "Lost", "", false},
	} {
		got, ok := g.NextHop(tc.from, tc.goal)
		if got != tc.want || ok != tc.ok {
			t.Errorf("NextHop(%s, %s) = %s, %t; want %s, %t", tc.from, tc.goal, got, ok, tc.want, tc.ok)
		}
	}
}
