package kubectlfsm

import (
	"bytes"
	"testing"
	"time"

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
