package fsm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestChangedFieldsNamesWhatDiffers(t *testing.T) {
	type status struct {
		State    string `json:"state,omitempty"`
		Failures int    `json:"failures,omitempty"`
		Note     string `json:"note,omitempty"`
	}
	got := changedFields(status{State: "A", Failures: 1}, status{State: "B", Note: "n"})
	if diff := cmp.Diff([]string{"failures", "note", "state"}, got); diff != "" {
		t.Errorf("changed fields (-want +got):\n%s", diff)
	}
	if got := changedFields(status{State: "A"}, status{State: "A"}); len(got) != 0 {
		t.Errorf("equal values changed %v", got)
	}
}
