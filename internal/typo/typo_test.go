package typo

import "testing"

func TestClosestSuggestsANameOnlyWhenItIsNearEnough(t *testing.T) {
	states := []string{"Provisioning", "Ready", "Deleting", "Read"}
	for _, c := range []struct{ s, want string }{
		{"Provisoning", "Provisioning"}, // a letter left out
		{"ready", "Ready"},              // case aside
		{"READY", "Ready"},
		{"Redy", "Ready"},        // one edit from Ready and from Read: the first listed
		{"Deletnig", "Deleting"}, // two edits in eight letters
		{"Dlting", "Deleting"},   // two edits in six
		{"Dltng", ""},            // three edits in five: too far
		{"Gone", ""},
		{"", ""},
	} {
		if got := Closest(c.s, states); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestClosestCountsEditsInCharacters(t *testing.T) {
	// Five characters in seven bytes: one edit is near enough, three
	// are not, as for any other name of five.
	if got := Closest("Größe", []string{"Grüße"}); got != "Grüße" {
		t.Errorf(`Closest("Größe", Grüße) = %q, want "Grüße"`, got)
	}
	if got := Closest("Größe", []string{"Gabce"}); got != "" {
		t.Errorf(`Closest("Größe", Gabce) = %q, want none: three edits in five characters`, got)
	}
	if d := distance("ÄÖÜ", "AOU"); d != 3 {
		t.Errorf("distance of three accented letters from their bare forms is %d, want 3", d)
	}
}

type state string

func TestClosestTakesNamedStringTypes(t *testing.T) {
	if got := Closest(state("Opne"), []state{"Closed", "Open"}); got != "Open" {
		t.Errorf("Closest = %q, want Open", got)
	}
}
