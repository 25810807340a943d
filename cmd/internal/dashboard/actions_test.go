package dashboard

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

func TestActionRows(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.MicroTime { return metav1.MicroTime{Time: now.Add(-d)} }
	const key = "0123456789abcdef0123456789abcdef"
	long := strings.Repeat("x", clipAt+1)
	lost := []metav1.Condition{{Type: fsm.ConditionStalled, Status: metav1.ConditionTrue, Reason: fsm.ReasonActionIndeterminate, Message: "action copy (key " + key + ") was running when its run was lost"}}
	cases := map[string]struct {
		reason     string
		conditions []metav1.Condition
		rec        fsm.ActionRecord
		want       actionRow
	}{
		"Running": {
			reason: "no outcome and no stall; the heartbeat's age, and the progress",
			rec:    fsm.ActionRecord{Name: "copy", Key: key, Started: at(5 * time.Minute), Heartbeat: ptr(at(20 * time.Second)), Progress: "3 of 5"},
			want:   actionRow{Name: "copy", Key: key, Status: "Running", Class: "running", Age: "5m", Heartbeat: "20s", Progress: clipped{"3 of 5", "3 of 5"}},
		},
		"Indeterminate": {
			reason:     "Stalled on this action's key",
			conditions: lost,
			rec:        fsm.ActionRecord{Name: "copy", Key: key, Started: at(5 * time.Minute)},
			want:       actionRow{Name: "copy", Key: key, Status: "Indeterminate", Class: "indeterminate", Age: "5m", Indeterminate: true},
		},
		"Succeeded": {
			reason: "the result",
			rec:    fsm.ActionRecord{Name: "copy", Key: key, Started: at(5 * time.Minute), Outcome: "Succeeded", Result: "done"},
			want:   actionRow{Name: "copy", Key: key, Status: "Succeeded", Class: "succeeded", Age: "5m", Ending: clipped{"result: done", "result: done"}},
		},
		"FailedWhileStalled": {
			reason:     "an outcome is the word, whatever the condition says; the error, clipped",
			conditions: lost,
			rec:        fsm.ActionRecord{Name: "copy", Key: key, Started: at(5 * time.Minute), Outcome: "Failed", Error: long},
			want: actionRow{Name: "copy", Key: key, Status: "Failed", Class: "failed", Age: "5m",
				Ending: clipped{("error: " + long)[:clipAt-1] + "…", "error: " + long}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := inspect.Object{Status: fsm.Status{Conditions: tc.conditions, Actions: []fsm.ActionRecord{tc.rec}}}
			if diff := cmp.Diff([]actionRow{tc.want}, actionRows(o, now)); diff != "" {
				t.Errorf("%s\nactionRows (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// An object not at the machine's graph version says so among its notes.
func TestNotesTellAnObjectNotYetMigrated(t *testing.T) {
	m := &inspect.Machine{Graph: &graph.Graph{Name: "webapp", Version: 2}}
	for v, want := range map[int32]string{
		0: "graph version 1, the machine's is 2: the operator migrates it when it next reads it",
		2: "",
		3: "graph version 3, the machine's is 2: a newer operator wrote it, and this one leaves it alone",
	} {
		got := notes(m, inspect.Object{Status: fsm.Status{GraphVersion: v}})
		if want == "" && len(got) > 0 || want != "" && !slices.Contains(got, want) {
			t.Errorf("notes of an object at graph version %d = %q, want %q", v, got, want)
		}
	}
}
