package fsmtest

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A schedule reads back as it prints, drifts among its faults, and a
// schedule that names a fault wrongly gets an error.
func TestSchedulesReadAsTheyPrint(t *testing.T) {
	cases := map[string]struct {
		text    string
		want    schedule
		wantErr bool
	}{
		"WriteAndCall":   {text: "crash:3,call-lost:2", want: schedule{{Kind: atomCrash, N: 3}, {Kind: atomCallLost, N: 2}}},
		"DriftAndBurst":  {text: "burst,drift:stopped:4", want: schedule{{Kind: atomBurst}, {Kind: atomDrift, N: 4, Res: "stopped"}}},
		"WatchEvent":     {text: "relist:configmaps:7", want: schedule{{Kind: atomRelist, N: 7, Res: "configmaps"}}},
		"DriftNoName":    {text: "drift:4", wantErr: true},
		"DriftEmptyName": {text: "drift::4", wantErr: true},
		"CrashNamed":     {text: "crash:x:4", wantErr: true},
		"Unknown":        {text: "flood:2", wantErr: true},
		"FromZero":       {text: "drift:stopped:0", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseSchedule(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseSchedule(%q): error %v, want an error: %v", tc.text, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseSchedule(%q) (-want +got):\n%s", tc.text, diff)
			}
			if got.String() != tc.text {
				t.Errorf("%q prints as %q", tc.text, got.String())
			}
		})
	}
}

// Every kind of fault at a point is one that Explore names, and the
// class of Faults that strikes it is one of AllFaults, with a run name of
// its own: a kind added to the vocabulary is struck by both.
func TestEveryFaultKindHasAClassOrIsExplores(t *testing.T) {
	runs := map[Fault]map[string]bool{}
	for kind, k := range faultKinds {
		if k.what == "" {
			t.Errorf("%s says nothing of what it does", kind)
		}
		if k.class == "" {
			continue
		}
		if !slices.Contains(AllFaults, k.class) {
			t.Errorf("%s's class %s is not in AllFaults", kind, k.class)
		}
		a := atom{Kind: kind, N: 2, Res: "stopped"}
		if runs[k.class] == nil {
			runs[k.class] = map[string]bool{}
		}
		if kind != atomCrash && kind != atomFail && runs[k.class][a.run()] {
			t.Errorf("%s's run %s is another kind's of class %s", kind, a.run(), k.class)
		}
		runs[k.class][a.run()] = true
	}
	for a, want := range map[atom]string{{Kind: atomDrift, N: 2, Res: "stopped"}: "drift-stopped-2", {Kind: atomFail, N: 3}: "write-3", {Kind: atomCallLost, N: 4}: "call-lost-4"} {
		if got := a.run(); got != want {
			t.Errorf("the run of %s is %q, want %q", a, got, want)
		}
	}
}
