package refusal

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWhySaysWhichEventNamesNoExit(t *testing.T) {
	type args struct {
		tense      Tense
		events     []string
		bad        string
		undeclared bool
		closest    string
	}
	exits := []string{"Eating", "Sleeping"}
	cases := map[string]struct {
		reason string
		args   args
		want   string
	}{
		"NotAnExit": {
			reason: "a declared state that is not among the exits names the exits",
			args:   args{tense: Past, events: []string{"Lost"}, bad: "Lost"},
			want:   "state Roaming asked to move to Lost, which is not among its exits [Eating, Sleeping]",
		},
		"NotAnExitOfSeveral": {
			reason: "of several events, the one that names no exit is named",
			args:   args{tense: Past, events: []string{"Eating", "Lost"}, bad: "Lost"},
			want:   "state Roaming raised events [Eating, Lost]; Lost is not among its exits [Eating, Sleeping]",
		},
		"Undeclared": {
			reason: "a state that is not declared says so, with the name meant",
			args:   args{tense: Past, events: []string{"Eatin"}, bad: "Eatin", undeclared: true, closest: "Eating"},
			want:   "state Roaming asked to move to Eatin, but no state Eatin is declared (did you mean Eating?); its exits are [Eating, Sleeping]",
		},
		"UndeclaredOfSeveral": {
			reason: "of several events, the undeclared one is named, without a guess when none is near",
			args:   args{tense: Past, events: []string{"Eating", "Nowhere"}, bad: "Nowhere", undeclared: true},
			want:   "state Roaming raised events [Eating, Nowhere]; no state Nowhere is declared; its exits are [Eating, Sleeping]",
		},
		"Present": {
			reason: "vet says the same in the present tense",
			args:   args{tense: Present, events: []string{"Eating", "Lost"}, bad: "Lost"},
			want:   "state Roaming raises events [Eating, Lost]; Lost is not among its exits [Eating, Sleeping]",
		},
		"PresentSingle": {
			reason: "vet says the same in the present tense",
			args:   args{tense: Present, events: []string{"Lost"}, bad: "Lost"},
			want:   "state Roaming asks to move to Lost, which is not among its exits [Eating, Sleeping]",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Why(tc.args.tense, "Roaming", tc.args.events, tc.args.bad, exits, tc.args.undeclared, tc.args.closest)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nWhy(...): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
