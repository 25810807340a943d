package explore

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A schedule reads back as it prints, drifts among its faults, and a
// schedule that names a fault wrongly gets an error.
func TestSchedulesReadAsTheyPrint(t *testing.T) {
	cases := map[string]struct {
		text    string
		want    Schedule
		wantErr bool
	}{
		"WriteAndCall":   {text: "crash:moose/milo:3,call-lost:2", want: Schedule{{Kind: Crash, N: 3, Res: "moose/milo"}, {Kind: CallLost, N: 2}}},
		"DriftAndBurst":  {text: "burst,drift:stopped:4", want: Schedule{{Kind: Burst}, {Kind: Drift, N: 4, Res: "stopped"}}},
		"WatchEvent":     {text: "relist:configmaps:7", want: Schedule{{Kind: Relist, N: 7, Res: "configmaps"}}},
		"DriftNoName":    {text: "drift:4", wantErr: true},
		"DriftEmptyName": {text: "drift::4", wantErr: true},
		"CrashUnnamed":   {text: "crash:4", wantErr: true},
		"FailEmptyName":  {text: "fail::4", wantErr: true},
		"Unknown":        {text: "flood:2", wantErr: true},
		"FromZero":       {text: "drift:stopped:0", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse(%q): error %v, want an error: %v", tc.text, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tc.text, diff)
			}
			if got.String() != tc.text {
				t.Errorf("%q prints as %q", tc.text, got.String())
			}
		})
	}
}

// Kinds lists every kind of the vocabulary once, and each kind that
// strikes at a numbered point says what it does.
func TestKindsListTheVocabulary(t *testing.T) {
	listed := map[Kind]bool{}
	for _, k := range Kinds {
		if listed[k] {
			t.Errorf("%s is listed twice", k)
		}
		listed[k] = true
		if k == Lag || k == Burst {
			continue
		}
		if v, ok := kinds[k]; !ok || v.what == "" {
			t.Errorf("%s says nothing of what it does", k)
		}
	}
	for k := range kinds {
		if !listed[k] {
			t.Errorf("%s is not in Kinds", k)
		}
	}
}
