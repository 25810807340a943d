package kubectlfsm_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cmd/internal/kubectlfsm"
	"github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/graph"
)

// hostile is text that a terminal would obey: it sets the window title,
// clears the screen, writes the clipboard (OSC 52), forges a line, and
// starts a CSI both as a raw byte and as the C1 character.
const hostile = "\x1b]0;pwned\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \r\nForged: line \x9b31m \u009b31m \x7f\b"

// Whatever the cluster holds reaches the terminal without a control
// character but the newlines kubectl fsm writes itself: a published
// graph, a status or an event that carries escape sequences neither
// commands the terminal nor forges a line, and what it says can still be
// read.
func TestNothingFromTheClusterCommandsTheTerminal(t *testing.T) {
	e := fsmtest.New(t)
	h := &herd{env: e, kubeconfig: writeKubeconfig(t, e)}
	roaming, lost, gone := graph.State("Roaming"+hostile), graph.State("Lost"+hostile), fsm.State("Gone"+hostile)
	publishHostileGraph(t, e, &graph.Graph{Name: "evil", Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: roaming, Initial: true, Exits: []graph.State{lost}, Timeout: &graph.Timeout{After: 30 * time.Minute, To: lost}},
		{Name: lost, Final: true},
	}})

	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	cond := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: "grazing " + hostile, LastTransitionTime: at(0), ObservedGeneration: 1}
	}
	h.moose(t, "moose-evil", nil, fsm.Status{
		State: fsm.State(roaming), StateSince: ptr(at(5 * time.Minute)), Failures: 2,
		History: []fsm.Transition{
			{To: fsm.State(roaming), Reason: "Created" + hostile, Time: at(0)},
			{From: fsm.State(roaming), To: fsm.State(lost), Reason: "Next" + hostile, Time: at(time.Minute)},
			{From: fsm.State(lost), To: fsm.State(roaming), Reason: "Next" + hostile, Time: at(5 * time.Minute)},
		},
		Conditions: []metav1.Condition{
			cond(fsm.ConditionReady, metav1.ConditionFalse, "Waiting"),
			cond(fsm.ConditionReconciling, metav1.ConditionTrue, "Waiting"),
		},
		// The moose is its own child, whose kstatus message is the
		// Reconciling condition's; the other child cannot exist.
		Outputs: []fsm.OutputRef{
			{Group: v1alpha1.GroupVersion.Group, Kind: "Moose", Namespace: e.Namespace, Name: "moose-evil"},
			{Kind: "ConfigMap", Namespace: e.Namespace, Name: "tag" + hostile},
		},
		Actions: []fsm.ActionRecord{
			{Name: "collar" + hostile, Key: "5f0c3a9e1b7d4c2a8e6f0b1d3c5a7e9f", State: fsm.State(roaming), Attempt: 1,
				Started: metav1.MicroTime(at(5 * time.Minute)), Heartbeat: ptr(metav1.MicroTime(at(6 * time.Minute))), Progress: "fitting " + hostile},
			{Name: "weigh", Key: "0e1d2c3b4a5968778695a4b3c2d1e0f1", State: fsm.State(roaming), Attempt: 1,
				Started: metav1.MicroTime(at(5 * time.Minute)), Outcome: "Failed", Error: hostile},
			{Name: "count", Key: "a1b2c3d4e5f60718293a4b5c6d7e8f90", State: fsm.State(roaming), Attempt: 1,
				Started: metav1.MicroTime(at(5 * time.Minute)), Outcome: "Succeeded", Result: hostile},
		},
	})
	// An action's lost run stalled this one; the condition's message
	// quotes the action's name as kfsm writes it.
	const lostKey = "9d4e1c7b2a3f50681e2d3c4b5a697887"
	lostMsg := "action call" + hostile + " (key " + lostKey + ") was running when its run was lost"
	h.moose(t, "moose-lost", nil, fsm.Status{
		State: gone, StateSince: ptr(at(0)), History: []fsm.Transition{{To: gone, Reason: "Created", Time: at(0)}},
		Conditions: []metav1.Condition{
			{Type: fsm.ConditionReady, Status: metav1.ConditionFalse, Reason: fsm.ReasonActionIndeterminate, Message: lostMsg, LastTransitionTime: at(0), ObservedGeneration: 1},
			{Type: fsm.ConditionStalled, Status: metav1.ConditionTrue, Reason: fsm.ReasonActionIndeterminate, Message: lostMsg, LastTransitionTime: at(0), ObservedGeneration: 1},
		},
		Actions: []fsm.ActionRecord{{Name: "call" + hostile, Key: lostKey, State: gone, Attempt: 1,
			Started: metav1.MicroTime(at(0)), Heartbeat: ptr(metav1.MicroTime(at(time.Minute))), Progress: "dialled " + hostile}},
	})
	h.moose(t, "moose-stalled", nil, fsm.Status{
		State: gone, StateSince: ptr(at(0)), History: []fsm.Transition{{To: gone, Reason: "Created", Time: at(0)}},
		Conditions: []metav1.Condition{cond(fsm.ConditionReady, metav1.ConditionFalse, "Stopped"), cond(fsm.ConditionStalled, metav1.ConditionTrue, "Stopped")},
	})
	e.Create(&eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "moose-evil.hostile", Namespace: e.Namespace},
		EventTime:  metav1.NewMicroTime(t0.Add(5 * time.Minute)), ReportingController: "kfsm.dev/evil", ReportingInstance: "test",
		Action: "Roaming", Reason: "Next" + hostile, Type: corev1.EventTypeWarning, Note: "moved " + hostile,
		Regarding: corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Moose", Namespace: e.Namespace, Name: "moose-evil", UID: types.UID(h.uid(t, "moose-evil"))},
	})

	for _, args := range [][]string{
		{"graph", "moose:evil"},
		{"graph", "moose:evil", "--counts"},
		{"graph", "moose:evil", "-o", "mermaid"},
		{"graph", "moose:evil", "-o", "dot"},
		{"get", "moose:evil"},
		{"get", "moose:evil", "-o", "wide"},
		{"get", "moose:evil", "-o", "yaml"},
		{"get", "moose:evil", "-o", "jsonpath={.items[*].status.conditions[*].message}"},
		{"get", "moose:evil", "-o", "custom-columns=NAME:.metadata.name,MESSAGE:.status.conditions[*].message"},
		{"describe", "moose:evil/moose-evil"},
		{"why", "moose:evil/moose-evil"},
		{"why", "moose:evil/moose-stalled"},
		{"describe", "moose:evil/moose-lost"},
		{"why", "moose:evil/moose-lost"},
		{"pause", "moose:evil/moose-evil"},
		{"retry", "moose:evil/moose-evil"},
	} {
		out, err := h.run(t, args...)
		// why's exit statuses of a Stalled or failing object are not errors.
		if kubectlfsm.ExitCode(err) == 1 {
			t.Errorf("kubectl fsm %s: %v", strings.Join(args, " "), err)
		}
		assertPrintable(t, "kubectl fsm "+strings.Join(args, " "), out)
	}

	// The actions are there, escaped: their names, their progress and
	// their ends, whole or clipped.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"describe", "moose:evil/moose-evil"}, []string{
			`collar\x1b]0;pwned\a \x1b[2J`, `Running`, `heartbeat 4m ago`, `progress: fitting \x1b]0;pwned\a`,
			`Failed`, `error: \x1b]0;pwned\a \x1b[2J`, `Succeeded`, `result: \x1b]0;pwned\a \x1b[2J`,
		}},
		{[]string{"describe", "moose:evil/moose-lost"}, []string{`call\x1b]0;pwned\a`, `Indeterminate`, `progress: dialled \x1b]0;pwned\a`}},
		{[]string{"why", "moose:evil/moose-lost"}, []string{
			`  action call\x1b]0;pwned\a`, `(key ` + lostKey + `): started 10m ago, last heartbeat 9m ago, last checkpoint: dialled \x1b]0;pwned\a`,
			`kfsm will not run call\x1b]0;pwned\a`, `kubectl fsm retry moose/moose-lost`,
		}},
	} {
		out, err := h.run(t, c.args...)
		for _, want := range c.want {
			if kubectlfsm.ExitCode(err) == 1 || !strings.Contains(out, want) {
				t.Errorf("kubectl fsm %s: %v; it does not say %q:\n%s", strings.Join(c.args, " "), err, want, out)
			}
		}
	}

	// JSON stays JSON, and says what the cluster holds: the text, with
	// the byte that is not UTF-8 made the replacement character, as
	// encoding/json sent it.
	stored := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
	out, err := h.run(t, "graph", "moose:evil", "-o", "json")
	assertPrintable(t, "kubectl fsm graph -o json", out)
	if g, perr := graph.ParseJSON([]byte(out)); err != nil || perr != nil || g.States[0].Name != graph.State(stored(string(roaming))) {
		t.Errorf("kubectl fsm graph -o json: %v, %v: it does not read back as the published graph:\n%s", err, perr, out)
	}
	out, err = h.run(t, "get", "moose:evil", "-o", "json")
	assertPrintable(t, "kubectl fsm get -o json", out)
	var list struct {
		Items []v1alpha1.Moose `json:"items"`
	}
	if jerr := json.Unmarshal([]byte(out), &list); err != nil || jerr != nil || len(list.Items) != 3 || list.Items[0].Status.Conditions[0].Message != stored("grazing "+hostile) {
		t.Errorf("kubectl fsm get -o json: %v, %v: it does not read back as the moose:\n%s", err, jerr, out)
	}

	t.Run("watch", func(t *testing.T) {
		out, stop := h.watch(t, "moose:evil", "moose-evil")
		m := &v1alpha1.Moose{}
		if err := e.Client.Get(t.Context(), client.ObjectKey{Namespace: e.Namespace, Name: "moose-evil"}, m); err != nil {
			t.Fatal(err)
		}
		m.Status.History = append(m.Status.History, fsm.Transition{From: fsm.State(roaming), To: fsm.State(lost), Reason: "Timeout" + hostile, Time: metav1.NewTime(time.Now())})
		if err := e.Client.Status().Update(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "Timeout") && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		got := stop()
		if !strings.Contains(got, "Timeout") {
			t.Errorf("kubectl fsm watch printed no transition to Lost:\n%q", got)
		}
		assertPrintable(t, "kubectl fsm watch", got)
	})
}

// publishHostileGraph publishes g on the moose CRD as machine evil's,
// until the test ends.
func publishHostileGraph(t *testing.T, e *fsmtest.Env, g *graph.Graph) {
	t.Helper()
	data, err := g.JSON()
	if err != nil {
		t.Fatal(err)
	}
	value, err := json.Marshal(fsm.PublishedGraph{Machine: "evil", Graph: data,
		Resource: fsm.PublishedResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "Moose" + hostile, Resource: "moose"}})
	if err != nil {
		t.Fatal(err)
	}
	patch := func(value any) {
		p, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fsm.AnnotationGraphPrefix + "evil": value}}})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := e.Kubectl("patch", "crd", "moose.examples.kfsm.dev", "--type=merge", "-p", string(p)); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	patch(string(value))
	t.Cleanup(func() { patch(nil) })
}

// assertPrintable fails unless out holds no control character but
// newlines and tabs, no line starts where hostile forges one, and what
// hostile says is still there to read.
func assertPrintable(t *testing.T, what, out string) {
	t.Helper()
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		if (r == utf8.RuneError && n == 1) || (unicode.IsControl(r) && r != '\n' && r != '\t') {
			t.Errorf("%s printed %q at byte %d:\n%q", what, out[i:i+n], i, out)
			return
		}
		i += n
	}
	if regexp.MustCompile(`(?m)^Forged`).MatchString(out) {
		t.Errorf("%s printed a forged line:\n%s", what, out)
	}
	if !strings.Contains(out, "pwned") || !strings.Contains(out, "Forged: line") {
		t.Errorf("%s does not show the text it escaped:\n%s", what, out)
	}
}
