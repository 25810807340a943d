package kubectlfsm

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

func TestActionStatus(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	stalled := func(s metav1.ConditionStatus, reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: fsm.ConditionStalled, Status: s, Reason: reason, Message: msg}}
	}
	lost := "action copy (key " + key + ") was running when its run was lost"
	cases := map[string]struct {
		reason     string
		conditions []metav1.Condition
		rec        fsm.ActionRecord
		want       string
	}{
		"Running":   {reason: "no outcome and no stall", rec: fsm.ActionRecord{Key: key}, want: "Running"},
		"Succeeded": {reason: "the outcome is the word", rec: fsm.ActionRecord{Key: key, Outcome: "Succeeded"}, want: "Succeeded"},
		"Failed":    {reason: "the outcome is the word", rec: fsm.ActionRecord{Key: key, Outcome: "Failed"}, want: "Failed"},
		"Indeterminate": {reason: "Stalled on this action's key",
			conditions: stalled(metav1.ConditionTrue, fsm.ReasonActionIndeterminate, lost), rec: fsm.ActionRecord{Key: key}, want: "Indeterminate"},
		"AnotherActionsKey": {reason: "the stall names another run",
			conditions: stalled(metav1.ConditionTrue, fsm.ReasonActionIndeterminate, "action copy (key fedcba9876543210fedcba9876543210)"), rec: fsm.ActionRecord{Key: key}, want: "Running"},
		"AnotherReason": {reason: "a stall for another reason that quotes the key",
			conditions: stalled(metav1.ConditionTrue, fsm.ReasonHandlerFailed, lost), rec: fsm.ActionRecord{Key: key}, want: "Running"},
		"NotStalled": {reason: "a Stalled condition that is not True",
			conditions: stalled(metav1.ConditionFalse, fsm.ReasonActionIndeterminate, lost), rec: fsm.ActionRecord{Key: key}, want: "Running"},
		"EndedBeforeTheStall": {reason: "a recorded outcome is the word, whatever the condition says",
			conditions: stalled(metav1.ConditionTrue, fsm.ReasonActionIndeterminate, lost), rec: fsm.ActionRecord{Key: key, Outcome: "Failed"}, want: "Failed"},
		"NoKey": {reason: "an empty key is in every message",
			conditions: stalled(metav1.ConditionTrue, fsm.ReasonActionIndeterminate, lost), rec: fsm.ActionRecord{}, want: "Running"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := inspect.Object{Status: fsm.Status{Conditions: tc.conditions}}
			if got := actionStatus(o, tc.rec); got != tc.want {
				t.Errorf("%s\nactionStatus = %q, want %q", tc.reason, got, tc.want)
			}
		})
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("ab", 40)
	cases := map[string]struct {
		in, want string
	}{
		"Short":      {in: "copied 3 of 5", want: "copied 3 of 5"},
		"AtTheBound": {in: long[:clipAt], want: long[:clipAt]},
		"Long":       {in: long, want: long[:clipAt-1] + "…"},
		"Runes":      {in: strings.Repeat("é", 70), want: strings.Repeat("é", clipAt-1) + "…"},
		"Escaped":    {in: "a\x1b]0;t\x07\r\nb", want: `a\x1b]0;t\a\r\nb`},
		"EscapedThenCut": {in: strings.Repeat("\x1b", 20),
			want: strings.Repeat(`\x1b`, 14) + `\x1…`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := clip(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("clip(%q) (-want +got):\n%s", tc.in, diff)
			}
			if strings.ContainsFunc(got, unicode.IsControl) {
				t.Errorf("clip(%q) = %q holds a control character", tc.in, got)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// describe lists the actions between the conditions and the children,
// and says so when there is none.
func TestDescribeShowsTheActions(t *testing.T) {
	g := &graph.Graph{Name: "backup", Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: "Copying", Initial: true, Exits: []graph.State{"Done"}},
		{Name: "Done", Final: true},
	}}
	m := &inspect.Machine{Graph: g, GVR: schema.GroupVersionResource{Resource: "backups"}}
	start := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	const key = "0123456789abcdef0123456789abcdef"
	cases := map[string]struct {
		actions []fsm.ActionRecord
		want    string
	}{
		"None": {want: "\nActions:\n  (none)\n\nChildren:\n"},
		"Running": {
			actions: []fsm.ActionRecord{{Name: "copy", Key: key, Started: metav1.MicroTime{Time: start}, Heartbeat: &metav1.MicroTime{Time: start.Add(4 * time.Minute)}, Progress: "copied 3 of 5"}},
			want:    "\nActions:\n  copy  Running  key " + key + "  started 5m ago  heartbeat 1m ago  progress: copied 3 of 5\n\nChildren:\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := inspect.Object{Name: "b", Status: fsm.Status{State: "Copying", Actions: tc.actions}}
			var out bytes.Buffer
			writeDescribe(&out, m, o, details{}, start.Add(5*time.Minute))
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("describe does not show\n%s\nit shows\n%s", tc.want, out.String())
			}
		})
	}
}
