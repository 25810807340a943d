package migrate

import (
	"slices"
	"strings"
	"testing"
)

func declaredOf(states ...string) func(string) bool {
	return func(s string) bool { return slices.Contains(states, s) }
}

func TestMapFollowsEveryVersionFromTheObjects(t *testing.T) {
	p, problems := New(map[int][]Step{
		2: {{Kind: Rename, From: []string{"Old"}, To: "Mid"}, {Kind: Remove, From: []string{"Gone"}, To: "Kept"}},
		3: {{Kind: Rename, From: []string{"Mid"}, To: "New"}, {Kind: Split, From: []string{"Both"}, Pick: 0},
			{Kind: Merge, From: []string{"Nap", "Doze"}, To: "Sleep"}},
	}, declaredOf("New", "Kept", "Left", "Right", "Sleep", "Other"))
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	pick := func(i int) string {
		if i != 0 {
			t.Fatalf("pick %d, want the only split's 0", i)
		}
		return "Right"
	}
	for _, tc := range []struct {
		from       int
		state, out string
	}{
		{1, "Old", "New"}, {2, "Mid", "New"}, {3, "Mid", "Mid"}, // a version-3 object is current
		{1, "Gone", "Kept"}, {1, "Both", "Right"}, {2, "Doze", "Sleep"},
		{1, "Other", "Other"}, {1, "", ""},
	} {
		if got := p.Map(tc.from, tc.state, pick); got != tc.out {
			t.Errorf("Map(%d, %q) = %q, want %q", tc.from, tc.state, got, tc.out)
		}
	}
	if p.Current != 3 {
		t.Errorf("Current = %d, want 3", p.Current)
	}
}

func TestNewRefusesMigrationsThatStrandObjects(t *testing.T) {
	for name, tc := range map[string]struct {
		versions map[int][]Step
		want     string
	}{
		"VersionOne":     {map[int][]Step{1: {{Kind: Rename, From: []string{"A"}, To: "B"}}}, "versions start at 1"},
		"NoState":        {map[int][]Step{2: {{Kind: Rename, To: "B"}}}, "names no state"},
		"Twice":          {map[int][]Step{2: {{Kind: Rename, From: []string{"A"}, To: "B"}, {Kind: Remove, From: []string{"A"}, To: "B"}}}, "state A is migrated twice"},
		"StillDeclared":  {map[int][]Step{2: {{Kind: Rename, From: []string{"B"}, To: "C"}}}, "state B is still declared"},
		"UndeclaredGoal": {map[int][]Step{2: {{Kind: Rename, From: []string{"A"}, To: "Z"}}}, "leads to state Z, which the machine does not declare"},
		"LaterUndeclared": {map[int][]Step{
			2: {{Kind: Rename, From: []string{"A"}, To: "M"}},
			3: {{Kind: Rename, From: []string{"M"}, To: "Z"}},
		}, "leads to state Z"},
	} {
		t.Run(name, func(t *testing.T) {
			_, problems := New(tc.versions, declaredOf("B", "C"))
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("problems %q, want one saying %q", problems, tc.want)
			}
		})
	}
}
