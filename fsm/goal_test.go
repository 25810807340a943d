package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// toward moves along the path to the goal and stays at it.
func toward(_ context.Context, r *request) fsm.Result {
	if r.NextHop != "" {
		return fsm.Next(r.NextHop)
	}
	return fsm.Done()
}

// appMachine is OKT's application lifecycle, walking towards the state
// that the gadget's mode names.
func appMachine(name string) *fsm.Machine[*gadget] {
	return fsm.New[*gadget](name, fsm.Lifecycle).
		Initial("Start").
		State("Start", toward, fsm.To("Running")).
		State("Running", toward, fsm.To("Servicing", "Stopping")).
		State("Servicing", toward, fsm.To("Running", "End")).
		State("Stopping", toward, fsm.To("End")).
		State("End", done, fsm.Final()).
		Goal(func(g *gadget) fsm.State { return fsm.State(g.Spec.Mode) })
}

func TestGoalWalksThePathAndReplans(t *testing.T) {
	e := newEnv(t)
	r := e.reconciler(appMachine("goal"))
	e.gadget("g", v1alpha1.GadgetSpec{Mode: "Running"})

	walked := 0
	walk := func(goal fsm.State, want ...fsm.State) {
		t.Helper()
		e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = string(goal) })
		e.reconcile(r, "g")
		g := e.get("g")
		var got []fsm.State
		for _, tr := range g.Status.History[walked:] {
			got = append(got, tr.To)
		}
		walked = len(g.Status.History)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("walking to %s (-want +got):\n%s", goal, diff)
		}
		wantCondition(t, g, fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
	}
	walk("Running", "Start", "Running")
	walk("Servicing", "Servicing")
	walk("Running", "Running")
	// Two paths of two steps: the one through the exit declared first.
	walk("End", "Servicing", "End")

	// Staying at the goal writes nothing.
	before := e.get("g").ResourceVersion
	e.reconcile(r, "g")
	if after := e.get("g").ResourceVersion; after != before {
		t.Errorf("an object at its goal was written: resourceVersion %s → %s", before, after)
	}
}

func TestUnreachableGoalIsStalledWithThePathProblem(t *testing.T) {
	e := newEnv(t)
	m := appMachine("goal-unreachable")
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{Mode: "Servicing"})
	e.reconcile(r, "g")

	for goal, want := range map[string]string{
		"Start":   "no path leads from state Servicing to goal Start through the declared exits; from Servicing the machine can reach only Running, Stopping, End",
		"Nowhere": "goal Nowhere is not a state of machine goal-unreachable (states: Start, Running, Servicing, Stopping, End)",
	} {
		e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = goal })
		e.reconcile(r, "g")
		g := e.get("g")
		wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, fsm.ReasonGoalUnreachable)
		if msg := condition(g, fsm.ConditionStalled).Message; msg != want {
			t.Errorf("goal %s: Stalled message\n %q, want\n %q", goal, msg, want)
		}
		if g.Status.State != "Servicing" {
			t.Errorf("goal %s: the object moved to %s", goal, g.Status.State)
		}
	}

	// A reachable goal again: the walk resumes and the stall clears.
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "Running" })
	e.reconcile(r, "g")
	g := e.get("g")
	if g.Status.State != "Running" || condition(g, fsm.ConditionStalled) != nil {
		t.Errorf("state %s, Stalled %+v; want Running and no longer stalled", g.Status.State, condition(g, fsm.ConditionStalled))
	}
}

func TestCheckGoalAnswersForAdmission(t *testing.T) {
	m := appMachine("goal-check")
	for _, tc := range []struct {
		from, goal fsm.State
		ok         bool
		says       string
	}{
		{"", "End", true, ""},
		{"Running", "Running", true, ""},
		{"Stopping", "Running", false, "can reach only End"},
		{"End", "Running", false, "End has no way out"},
		{"Running", "Paused", false, "not a state"},
	} {
		err := m.CheckGoal(tc.from, tc.goal)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.says)) {
			t.Errorf("CheckGoal(%q, %q) = %v, want ok=%v saying %q", tc.from, tc.goal, err, tc.ok, tc.says)
		}
	}
	// Built or not, the answer is the same.
	if err := m.Build(); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckGoal("Stopping", "Running"); err == nil {
		t.Error("CheckGoal after Build finds a path that does not exist")
	}
}

func TestGoalOnAPipelineIsRefused(t *testing.T) {
	m := fsm.New[*gadget]("goal-pipeline", fsm.Pipeline).
		Initial("A").
		State("A", done, fsm.Final()).
		Goal(func(*gadget) fsm.State { return "A" })
	if err := m.Build(); err == nil || !strings.Contains(err.Error(), "lifecycle") {
		t.Errorf("Build() = %v, want the goal refused", err)
	}
}

func TestPrioritizedEvents(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("events", fsm.Lifecycle).
		Initial("Running").
		State("Running", func(_ context.Context, r *request) fsm.Result {
			switch r.Object.Spec.Mode {
			case "both":
				return fsm.Next("Stopping", "Servicing")
			case "default":
				return fsm.Next(fsm.Default)
			case "default-and-first":
				return fsm.Next(fsm.Default, "Servicing")
			}
			return fsm.Next("Servicing", "Bogus")
		}, fsm.To("Servicing", "Stopping")).
		State("Servicing", done, fsm.Final()).
		State("Stopping", done, fsm.Final())
	r := e.reconciler(m)
	for name, want := range map[string]fsm.State{
		"both":              "Servicing",
		"default":           "Stopping",
		"default-and-first": "Servicing",
		"bogus":             "Running",
	} {
		e.gadget(name, v1alpha1.GadgetSpec{Mode: name})
		e.reconcile(r, name)
		if got := e.get(name).Status.State; got != want {
			t.Errorf("events %s: state %s, want %s", name, got, want)
		}
	}
	g := e.get("bogus")
	wantCondition(t, g, fsm.ConditionStalled, metav1.ConditionTrue, fsm.ReasonIllegalTransition)
	want := "state Running raised events [Servicing, Bogus]; no state Bogus is declared; its exits are [Servicing, Stopping]; the transition was refused"
	if msg := condition(g, fsm.ConditionStalled).Message; msg != want {
		t.Errorf("Stalled message %q, want %q", msg, want)
	}
}

func TestResyncRequeuesDoneObjectsWithJitter(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("resync", fsm.Lifecycle).
		Initial("Polling").
		State("Polling", done, fsm.Final()).
		Tune(fsm.Tuning{Resync: time.Minute})
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	seen := map[time.Duration]bool{}
	for range 5 {
		res := e.reconcile(r, "g")
		if res.RequeueAfter < 54*time.Second || res.RequeueAfter > 66*time.Second {
			t.Fatalf("RequeueAfter = %v, want a minute give or take a tenth", res.RequeueAfter)
		}
		seen[res.RequeueAfter] = true
	}
	if len(seen) < 2 {
		t.Error("five resyncs were all the same delay: no jitter")
	}
	wantCondition(t, e.get("g"), fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
}

func TestTransitionObserversSeeWrittenTransitionsInOrder(t *testing.T) {
	e := newEnv(t)
	var seen []string
	m := fsm.New[*gadget]("observed", fsm.Lifecycle).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", next("C"), fsm.To("C")).
		State("C", done, fsm.Final()).
		Observe(fsm.Observers[*gadget]{Transition: func(_ context.Context, g *gadget, tr fsm.Transition) {
			seen = append(seen, fmt.Sprintf("%s %s: %s→%s %s", g.GetObjectKind().GroupVersionKind().Kind, g.Name, tr.From, tr.To, tr.Reason))
		}})
	e.gadget("g", v1alpha1.GadgetSpec{})

	// A status write that fails reports nothing: the transitions did not
	// happen.
	failing := interceptor.NewClient(e.direct.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return errors.New("injected write failure")
		},
	})
	r, err := m.Reconciler(failing, e.events)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), reconcileRequest(e, "g")); err == nil {
		t.Fatal("the injected failure did not fail the reconcile")
	}
	if len(seen) != 0 {
		t.Fatalf("transitions reported although their status was not written: %v", seen)
	}

	e.reconcile(e.reconciler(m), "g")
	// Each object carries its kind, which a typed object decoded by the
	// client has not.
	want := []string{"Gadget g: →A Created", "Gadget g: A→B Next", "Gadget g: B→C Next"}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("observed transitions (-want +got):\n%s", diff)
	}
}
