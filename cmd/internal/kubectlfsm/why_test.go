package kubectlfsm

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

// why names the edge that a timeout will take, and when, and the children
// that are not ready.
func TestWhyTellsTheTimeoutAndTheChildren(t *testing.T) {
	g := &graph.Graph{Name: "rollout", Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: "Canary", Initial: true, Exits: []graph.State{"Promoted"}, Timeout: &graph.Timeout{After: 10 * time.Minute, To: "RolledBack"}},
		{Name: "Promoted", Final: true},
		{Name: "RolledBack", Final: true},
	}}
	m := &inspect.Machine{Graph: g, GVR: schema.GroupVersionResource{Resource: "rollouts"}}
	start := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	o := inspect.Object{Name: "web", Generation: 1, Status: fsm.Status{
		ObservedGeneration: 1, State: "Canary", StateSince: &metav1.Time{Time: start}, Failures: 2,
		RetryAt:    &metav1.MicroTime{Time: start.Add(4 * time.Minute)},
		Conditions: []metav1.Condition{{Type: fsm.ConditionReady, Status: metav1.ConditionFalse, Reason: "HandlerFailed", Message: "the canary answers 503"}},
	}}
	d := details{children: []child{
		{ref: fsm.OutputRef{Kind: "Deployment", Name: "web-canary"}, status: "InProgress", reason: "Available: 1/3"},
		{ref: fsm.OutputRef{Kind: "Service", Name: "web"}, status: "Current"},
	}}
	for _, c := range []struct {
		at   time.Duration
		want string
	}{
		{3 * time.Minute, `rollouts/web is not Ready: it has been in state Canary for 3m.
  HandlerFailed: the canary answers 503
  the handler failed 2 times in a row; next attempt in 1m
  child Deployment/web-canary is InProgress: Available: 1/3
  if it is still in Canary in 7m, its timeout takes it to RolledBack
`},
		{12 * time.Minute, `rollouts/web is not Ready: it has been in state Canary for 12m.
  HandlerFailed: the canary answers 503
  the handler failed 2 times in a row; next attempt due now
  child Deployment/web-canary is InProgress: Available: 1/3
  its timeout to RolledBack was due 2m ago: is the operator running?
`},
	} {
		var out bytes.Buffer
		writeWhy(&out, m, o, d, start.Add(c.at))
		if out.String() != c.want {
			t.Errorf("at %s:\n%s\nwant\n%s", c.at, out.String(), c.want)
		}
	}
}

// why lists the running actions of a waiting object, with their key, age,
// heartbeat and checkpoint; of an object that an action's lost run
// stalled, it names the action, its key and its last signs of life, and
// says what to do instead of the generic advice.
func TestWhyTellsTheActions(t *testing.T) {
	g := &graph.Graph{Name: "backup", Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: "Copying", Initial: true, Exits: []graph.State{"Done"}},
		{Name: "Done", Final: true},
	}}
	m := &inspect.Machine{Graph: g, GVR: schema.GroupVersionResource{Resource: "backups"}}
	start := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.MicroTime { return metav1.MicroTime{Time: start.Add(d)} }
	const key, other = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	copying := fsm.ActionRecord{Name: "copy", Key: key, State: "Copying", Attempt: 1, Started: at(0), Heartbeat: ptr(at(4 * time.Minute)), Progress: "copied 3 of 5 volumes"}
	notified := fsm.ActionRecord{Name: "notify", Key: other, State: "Copying", Attempt: 1, Started: at(0), Outcome: "Succeeded", Ended: ptr(at(time.Second)), Result: "sent"}
	stalled := func(msg string) []metav1.Condition {
		return []metav1.Condition{
			{Type: fsm.ConditionReady, Status: metav1.ConditionFalse, Reason: fsm.ReasonActionIndeterminate, Message: msg},
			{Type: fsm.ConditionStalled, Status: metav1.ConditionTrue, Reason: fsm.ReasonActionIndeterminate, Message: msg},
		}
	}
	lost := "action copy (key " + key + ") was running when its run was lost"
	cases := map[string]struct {
		reason     string
		conditions []metav1.Condition
		actions    []fsm.ActionRecord
		want       string
	}{
		"WaitingOnARunningAction": {
			reason: "a running action is listed with its key, age, heartbeat and checkpoint; one that ended is not",
			conditions: []metav1.Condition{
				{Type: fsm.ConditionReady, Status: metav1.ConditionFalse, Reason: "Waiting", Message: "copying"},
			},
			actions: []fsm.ActionRecord{copying, notified},
			want: `backups/b is not Ready: it has been in state Copying for 5m.
  Waiting: copying
  action copy is running (key ` + key + `): started 5m ago, last heartbeat 1m ago, last checkpoint: copied 3 of 5 volumes
`,
		},
		"RunningWithoutHeartbeat": {
			reason:  "a run that has not beaten yet says so",
			actions: []fsm.ActionRecord{{Name: "copy", Key: key, Started: at(0)}},
			want: `backups/b is not Ready: it has been in state Copying for 5m.
  action copy is running (key ` + key + `): started 5m ago, no heartbeat
`,
		},
		"Indeterminate": {
			reason:     "the action that the condition names, its signs of life, and what to do",
			conditions: stalled(lost),
			actions:    []fsm.ActionRecord{notified, copying},
			want: `backups/b is Stalled in state Copying: ActionIndeterminate: ` + lost + `
  action copy (key ` + key + `): started 5m ago, last heartbeat 1m ago, last checkpoint: copied 3 of 5 volumes
kfsm will not run copy again by itself: whether it took effect is unknown.
Check the system it acts on for key ` + key + `; if it did not take effect there, run it again, under a new key, with: kubectl fsm retry backups/b
`,
		},
		"IndeterminateActionGone": {
			reason:     "without the record that the condition names, the generic advice",
			conditions: stalled("action copy (key " + other + ") was running when its run was lost"),
			actions:    []fsm.ActionRecord{copying},
			want: `backups/b is Stalled in state Copying: ActionIndeterminate: action copy (key ` + other + `) was running when its run was lost
kfsm will not try again until the spec changes or you ask: kubectl fsm retry backups/b
`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := inspect.Object{Name: "b", Generation: 1, Status: fsm.Status{
				ObservedGeneration: 1, State: "Copying", StateSince: &metav1.Time{Time: start},
				Conditions: tc.conditions, Actions: tc.actions,
			}}
			var out bytes.Buffer
			writeWhy(&out, m, o, details{}, start.Add(5*time.Minute))
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("%s\nwriteWhy (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// why's exit status tells a script what the explanation tells a person.
func TestWhyExitStatus(t *testing.T) {
	cond := func(typ string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: "R"}
	}
	ready, notReady := cond(fsm.ConditionReady, metav1.ConditionTrue), cond(fsm.ConditionReady, metav1.ConditionFalse)
	stalled := cond(fsm.ConditionStalled, metav1.ConditionTrue)
	cases := map[string]struct {
		reason string
		object inspect.Object
		want   int
	}{
		"Ready":          {"a Ready object exits 0", inspect.Object{Status: fsm.Status{Conditions: []metav1.Condition{ready}}}, 0},
		"Waiting":        {"an object on its way exits 0", inspect.Object{Status: fsm.Status{Conditions: []metav1.Condition{notReady}}}, 0},
		"Stalled":        {"a Stalled object exits 2", inspect.Object{Status: fsm.Status{Failures: 3, Conditions: []metav1.Condition{notReady, stalled}}}, ExitStalled},
		"Failing":        {"an object whose handler fails and is retried exits 3", inspect.Object{Status: fsm.Status{Failures: 1, Conditions: []metav1.Condition{notReady}}}, ExitFailing},
		"Paused":         {"a paused object exits 4", inspect.Object{Paused: true, Status: fsm.Status{Conditions: []metav1.Condition{stalled}}}, ExitPaused},
		"NewSpec":        {"a Stalled object with a spec kfsm has not seen exits 0", inspect.Object{Generation: 2, Status: fsm.Status{ObservedGeneration: 1, Conditions: []metav1.Condition{stalled}}}, 0},
		"DeletingPaused": {"a paused object being deleted is read as deleted", inspect.Object{Paused: true, Deleting: true, Status: fsm.Status{Failures: 1}}, ExitFailing},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ExitCode(whyExit(tc.object)); got != tc.want {
				t.Errorf("%s: exit status %d, want %d", tc.reason, got, tc.want)
			}
		})
	}
}
