package fsmtest

import (
	"maps"
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
		"WriteAndCall":   {text: "crash:moose/milo:3,call-lost:2", want: schedule{{Kind: atomCrash, N: 3, Res: "moose/milo"}, {Kind: atomCallLost, N: 2}}},
		"DriftAndBurst":  {text: "burst,drift:stopped:4", want: schedule{{Kind: atomBurst}, {Kind: atomDrift, N: 4, Res: "stopped"}}},
		"WatchEvent":     {text: "relist:configmaps:7", want: schedule{{Kind: atomRelist, N: 7, Res: "configmaps"}}},
		"DriftNoName":    {text: "drift:4", wantErr: true},
		"DriftEmptyName": {text: "drift::4", wantErr: true},
		"CrashUnnamed":   {text: "crash:4", wantErr: true},
		"FailEmptyName":  {text: "fail::4", wantErr: true},
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

// Every kind of fault belongs to a class of AllFaults or to Explore
// alone, and every class of AllFaults strikes some kind: Faults, Explore
// restricted to AllFaults, strikes each class it names.
func TestEveryFaultKindHasAClassOrIsExplores(t *testing.T) {
	struck := map[Fault]bool{}
	for _, kind := range append(slices.Collect(maps.Keys(faultKinds)), atomLag, atomBurst) {
		if k, ok := faultKinds[kind]; ok && k.what == "" {
			t.Errorf("%s says nothing of what it does", kind)
		}
		class := kind.class()
		if class == "" {
			continue
		}
		if !slices.Contains(AllFaults, class) {
			t.Errorf("%s's class %s is not in AllFaults", kind, class)
		}
		struck[class] = true
	}
	for _, class := range AllFaults {
		if !struck[class] {
			t.Errorf("no kind of fault is of class %s: Faults would strike nothing of it", class)
		}
	}
}
