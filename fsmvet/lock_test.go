package fsmvet

import "testing"

func TestMigratedFollowsEachVersionOnce(t *testing.T) {
	// Version 2 split Eating, renamed Sleeping Napping and Napping, which
	// version 1 did not have, Dozing; version 3 merged Napping and Dozing
	// into Resting and removed Lost.
	m := &machine{versions: []versionDecl{
		{n: 3, migrations: []migrationDecl{{from: []string{"Napping", "Dozing"}, to: "Resting"}, {from: []string{"Lost"}, to: "Roaming"}}},
		{n: 2, migrations: []migrationDecl{{from: []string{"Eating"}}, {from: []string{"Sleeping"}, to: "Napping"}, {from: []string{"Napping"}, to: "Dozing"}}},
	}}
	for name, tc := range map[string]struct {
		reason string
		state  string
		from   int
		want   string
	}{
		"Untouched":         {reason: "a state that no migration moves keeps its name", state: "Tagged", from: 1, want: "Tagged"},
		"RenamedThenMerged": {reason: "each version moves the objects that the one before left", state: "Sleeping", from: 1, want: "Resting"},
		"FromALaterVersion": {reason: "only the versions after from count", state: "Napping", from: 2, want: "Resting"},
		"Removed":           {reason: "a removed state's objects go where the migration says", state: "Lost", from: 1, want: "Roaming"},
		"AtTheLastVersion":  {reason: "no version comes after the machine's own", state: "Lost", from: 3, want: "Lost"},
		"Split":             {reason: "a split's function picks the state at run time", state: "Eating", from: 1, want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			if got := m.migrated(tc.state, tc.from); got != tc.want {
				t.Errorf("%s: migrated(%q, %d) = %q, want %q", tc.reason, tc.state, tc.from, got, tc.want)
			}
		})
	}
}
