package kubectlfsm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/cmd/internal/kubectlfsm"
	"github.com/kfsm/kfsm/examples/moose"
	"github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDs:        []fs.FS{moose.CRDs},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
}

// t0 is when the fixed objects' stories start; the commands' clock reads
// now.
var (
	t0  = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	now = t0.Add(10 * time.Minute)
)

// herd is a cluster with the moose machine's graph published by the real
// operator, and fixed moose in a namespace that no operator serves.
type herd struct {
	env        *fsmtest.Env
	kubeconfig string
}

func newHerd(t *testing.T) *herd {
	t.Helper()
	// kubectl, and the plugin as kubectl does, cache discovery on disk:
	// in the test's own directory, not the user's.
	t.Setenv("KUBECACHEDIR", t.TempDir())
	// The operator publishes the graph when it starts; its own namespace
	// is not the fixed moose's.
	pub := fsmtest.New(t)
	op := fsmtest.Run(pub, moose.NewHerd(1).Machine())
	pub.Await("the moose graph on the CRD", func() bool {
		out, err := pub.Kubectl("get", "crd", "moose.examples.kfsm.dev", "-o", "jsonpath={.metadata.annotations}")
		return err == nil && strings.Contains(out, fsm.AnnotationGraphPrefix+"moose")
	})
	op.Stop()

	e := fsmtest.New(t)
	h := &herd{env: e, kubeconfig: writeKubeconfig(t, e)}
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	cond := func(typ string, s metav1.ConditionStatus, reason, msg string, d time.Duration) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, LastTransitionTime: at(d), ObservedGeneration: 1}
	}
	story := []fsm.Transition{
		{To: moose.Tagged, Reason: "Created", Time: at(0)},
		{From: moose.Tagged, To: moose.Roaming, Reason: "Next", Time: at(2 * time.Second)},
	}
	h.moose(t, "moose-01", nil, fsm.Status{
		State: moose.Roaming, StateSince: ptr(at(7 * time.Minute)),
		History: append(story, fsm.Transition{From: moose.Roaming, To: moose.Eating, Reason: "Next", Time: at(5 * time.Minute)},
			fsm.Transition{From: moose.Eating, To: moose.Roaming, Reason: "Next", Time: at(7 * time.Minute)}),
		Conditions: []metav1.Condition{
			cond(fsm.ConditionReady, metav1.ConditionFalse, "Waiting", "roaming until the moose is hungry", 2*time.Second),
			cond(fsm.ConditionReconciling, metav1.ConditionTrue, "Waiting", "roaming until the moose is hungry", 2*time.Second),
		},
		Outputs: []fsm.OutputRef{{Kind: "ConfigMap", Namespace: e.Namespace, Name: "moose-01-tag"}},
		// One action runs, with a checkpoint and a heartbeat; two ended.
		Actions: []fsm.ActionRecord{
			{Name: "upload-track", Key: "5f0c3a9e1b7d4c2a8e6f0b1d3c5a7e9f", State: moose.Roaming, Attempt: 1,
				Started: micro(at(7 * time.Minute)), Heartbeat: ptr(micro(at(9*time.Minute + 40*time.Second))), Progress: "uploaded 3 of 5 GPS segments"},
			{Name: "notify-ranger", Key: "a1b2c3d4e5f60718293a4b5c6d7e8f90", State: moose.Roaming, Attempt: 1,
				Started: micro(at(7 * time.Minute)), Outcome: "Succeeded", Ended: ptr(micro(at(7*time.Minute + 5*time.Second))), Result: "ranger 12 acknowledged"},
			{Name: "weigh", Key: "0e1d2c3b4a5968778695a4b3c2d1e0f1", State: moose.Roaming, Attempt: 1,
				Started: micro(at(7 * time.Minute)), Outcome: "Failed", Ended: ptr(micro(at(8 * time.Minute))),
				Error: "the scale at the north feeder answered 503 Service Unavailable three times, and the spare is offline"},
		},
	})
	e.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "moose-01-tag"}, Data: map[string]string{"tag": "1"}})
	h.moose(t, "moose-02", nil, fsm.Status{
		State: moose.Sleeping, StateSince: ptr(at(9 * time.Minute)), History: story,
		Conditions: []metav1.Condition{cond(fsm.ConditionReady, metav1.ConditionTrue, "Done", "asleep", 9*time.Minute)},
	})
	h.moose(t, "moose-03", nil, fsm.Status{
		State: moose.Eating, StateSince: ptr(at(4 * time.Minute)), History: story, Failures: 3,
		Conditions: []metav1.Condition{
			cond(fsm.ConditionReady, metav1.ConditionFalse, "RetriesExhausted", "eating failed 3 times: no grass left", 6*time.Minute),
			cond(fsm.ConditionStalled, metav1.ConditionTrue, "RetriesExhausted", "eating failed 3 times: no grass left", 6*time.Minute),
		},
	})
	h.moose(t, "moose-04", map[string]string{fsm.AnnotationPaused: "true"}, fsm.Status{
		State: moose.Tagged, StateSince: ptr(at(0)), History: story[:1],
	})
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "moose-01.roaming", Namespace: e.Namespace},
		EventTime:  metav1.NewMicroTime(t0.Add(7 * time.Minute)), ReportingController: "kfsm.dev/moose", ReportingInstance: "test",
		Action: "Roaming", Reason: "Next", Type: corev1.EventTypeNormal, Note: "moved from Eating to Roaming",
		Regarding: corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Moose", Namespace: e.Namespace, Name: "moose-01", UID: types.UID(h.uid(t, "moose-01"))},
	}
	e.Create(ev)
	return h
}

// lostHerd is, in a namespace of its own so that get's golden still counts
// four moose, a moose that an action's lost run stalled and one whose
// handler fails.
func lostHerd(t *testing.T) *herd {
	t.Helper()
	e := fsmtest.New(t)
	h := &herd{env: e, kubeconfig: writeKubeconfig(t, e)}
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	const key = "9d4e1c7b2a3f50681e2d3c4b5a697887"
	msg := "action call-vet (key " + key + ") was running when its run was lost (a restart, a failover or a slot handed over), and whether it took effect is unknown: kfsm does not run it again blindly. " +
		"Declare fsm.Observe or fsm.Idempotent for it, or check by hand and annotate kfsm.dev/retry to run it again"
	cond := func(typ string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: fsm.ReasonActionIndeterminate, Message: msg, LastTransitionTime: at(8 * time.Minute), ObservedGeneration: 1}
	}
	ready, stalled := cond(fsm.ConditionReady), cond(fsm.ConditionStalled)
	stalled.Status = metav1.ConditionTrue
	h.moose(t, "moose-05", nil, fsm.Status{
		State: moose.Eating, StateSince: ptr(at(4 * time.Minute)),
		History: []fsm.Transition{
			{To: moose.Tagged, Reason: "Created", Time: at(0)},
			{From: moose.Tagged, To: moose.Roaming, Reason: "Next", Time: at(2 * time.Second)},
			{From: moose.Roaming, To: moose.Eating, Reason: "Next", Time: at(4 * time.Minute)},
		},
		Conditions: []metav1.Condition{ready, stalled},
		Actions: []fsm.ActionRecord{{Name: "call-vet", Key: key, State: moose.Eating, Attempt: 1,
			Started: micro(at(4 * time.Minute)), Heartbeat: ptr(micro(at(5 * time.Minute))), Progress: "dialled the vet; waiting for an answer"}},
	})
	// A moose whose handler fails, and that kfsm retries.
	h.moose(t, "moose-06", nil, fsm.Status{
		State: moose.Eating, StateSince: ptr(at(4 * time.Minute)), Failures: 2, RetryAt: ptr(micro(at(11 * time.Minute))),
		History: []fsm.Transition{{To: moose.Tagged, Reason: "Created", Time: at(0)}, {From: moose.Tagged, To: moose.Eating, Reason: "Next", Time: at(4 * time.Minute)}},
		Conditions: []metav1.Condition{{Type: fsm.ConditionReady, Status: metav1.ConditionFalse, Reason: "HandlerFailed",
			Message: "eating: the feeder is empty", LastTransitionTime: at(5 * time.Minute), ObservedGeneration: 1}},
	})
	return h
}

func (h *herd) moose(t *testing.T, name string, annotations map[string]string, st fsm.Status) {
	t.Helper()
	m := &v1alpha1.Moose{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: v1alpha1.MooseSpec{Weight: 400}}
	h.env.Create(m)
	st.ObservedGeneration = m.Generation
	m.Status.Status = st
	if err := h.env.Client.Status().Update(t.Context(), m); err != nil {
		t.Fatal(err)
	}
}

func (h *herd) uid(t *testing.T, name string) string {
	t.Helper()
	m := &v1alpha1.Moose{}
	if err := h.env.Client.Get(t.Context(), client.ObjectKey{Namespace: h.env.Namespace, Name: name}, m); err != nil {
		t.Fatal(err)
	}
	return string(m.UID)
}

// run runs kubectl fsm in-process with the clock at now, and returns what
// it printed with the test's namespace written NAMESPACE.
func (h *herd) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := kubectlfsm.NewPluginCommand(&kubectlfsm.Options{Now: func() time.Time { return now }})
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--kubeconfig", h.kubeconfig, "-n", h.env.Namespace}, args...))
	err := root.ExecuteContext(t.Context())
	return strings.ReplaceAll(out.String(), h.env.Namespace, "NAMESPACE"), err
}

func TestGolden(t *testing.T) {
	h := newHerd(t)
	lost := lostHerd(t)
	cases := []struct {
		name string
		args []string
		on   *herd
	}{
		{"graph", []string{"graph", "moose"}, h},
		{"graph-counts", []string{"graph", "mo", "--counts"}, h},
		{"graph-mermaid", []string{"graph", "moose.examples.kfsm.dev", "-o", "mermaid"}, h},
		{"graph-dot", []string{"graph", "Moose", "-o", "dot"}, h},
		{"graph-json", []string{"graph", "moose", "-o", "json"}, h},
		{"get", []string{"get", "moose"}, h},
		{"get-names", []string{"get", "moose", "-o", "name"}, h},
		{"get-wide", []string{"get", "moose", "-o", "wide"}, h},
		{"get-jsonpath", []string{"get", "moose", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.state}{"\n"}{end}`}, h},
		{"get-custom-columns", []string{"get", "moose", "-o", "custom-columns=NAME:.metadata.name,STATE:{.status.state},READY:.status.conditions[?(@.type==\"Ready\")].status,NONE:.spec.nothing"}, h},
		{"get-bad-format", []string{"get", "moose", "-o", "svg"}, h},
		{"get-bad-columns", []string{"get", "moose", "-o", "custom-columns=NAME"}, h},
		{"describe", []string{"describe", "moose/moose-01"}, h},
		{"why-waiting", []string{"why", "moose/moose-01"}, h},
		{"why-ready", []string{"why", "moose", "moose-02"}, h},
		{"why-stalled", []string{"why", "moose/moose-03"}, h},
		{"why-paused", []string{"why", "moose/moose-04"}, h},
		{"describe-indeterminate", []string{"describe", "moose/moose-05"}, lost},
		{"why-indeterminate", []string{"why", "moose/moose-05"}, lost},
		{"why-failing", []string{"why", "moose/moose-06"}, lost},
		{"unknown-resource", []string{"get", "elk"}, h},
		{"bad-format", []string{"graph", "moose", "-o", "svg"}, h},
	}
	t.Run("get-all-namespaces", func(t *testing.T) {
		// Other tests' moose may be there too: only this herd's rows are
		// known.
		out, err := h.run(t, "get", "moose", "-A")
		row := regexp.MustCompile(`(?m)^NAMESPACE +moose-03 +Eating +6m +Stalled +RetriesExhausted$`)
		if err != nil || !strings.HasPrefix(out, "NAMESPACE ") || !row.MatchString(out) {
			t.Errorf("get -A: %v\n%s", err, out)
		}
	})
	// why's exit statuses; the other cases return no ExitError.
	exits := map[string]int{"why-stalled": kubectlfsm.ExitStalled, "why-indeterminate": kubectlfsm.ExitStalled,
		"why-failing": kubectlfsm.ExitFailing, "why-paused": kubectlfsm.ExitPaused}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := c.on.run(t, c.args...)
			var exit *kubectlfsm.ExitError
			code := 0
			if errors.As(err, &exit) {
				code, err = exit.Code, nil // why printed it all
			}
			if code != exits[c.name] {
				t.Errorf("exit status %d, want %d", code, exits[c.name])
			}
			if err != nil {
				out += "error: " + err.Error() + "\n"
			}
			golden(t, c.name, out)
		})
	}
}

// get -o yaml leaves out the objects' managedFields, as kubectl get does,
// unless --show-managed-fields asks for them.
func TestGetYAMLLeavesOutManagedFields(t *testing.T) {
	h := newHerd(t)
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"get", "moose", "-o", "yaml"}, false},
		{[]string{"get", "moose", "-o", "YAML", "--show-managed-fields"}, true},
	} {
		out, err := h.run(t, c.args...)
		if err != nil || !strings.Contains(out, "name: moose-04\n") || strings.Contains(out, "managedFields:") != c.want {
			t.Errorf("kubectl fsm %s: %v; want managedFields shown %v:\n%s", strings.Join(c.args, " "), err, c.want, out)
		}
	}
}

// The knobs write the annotations that kfsm reads, and nothing else.
func TestRetryPauseResume(t *testing.T) {
	h := newHerd(t)
	for _, step := range []struct {
		args []string
		want map[string]string
		says string
	}{
		{[]string{"pause", "moose/moose-02"}, map[string]string{fsm.AnnotationPaused: "true"}, "moose/moose-02 paused (in state Sleeping)"},
		{[]string{"resume", "moose/moose-02"}, map[string]string{}, "moose/moose-02 resumed (in state Sleeping)"},
		{[]string{"retry", "moose/moose-03"}, map[string]string{fsm.AnnotationRetry: now.Format(time.RFC3339Nano)}, "moose/moose-03 asked to retry (in state Eating)"},
	} {
		out, err := h.run(t, step.args...)
		if err != nil || strings.TrimSpace(out) != step.says {
			t.Errorf("%v: %q, %v; want %q", step.args, out, err, step.says)
		}
		m := &v1alpha1.Moose{}
		name := strings.TrimPrefix(step.args[1], "moose/")
		if err := h.env.Client.Get(t.Context(), client.ObjectKey{Namespace: h.env.Namespace, Name: name}, m); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for k, v := range m.Annotations {
			if strings.HasPrefix(k, "kfsm.dev/") {
				got[k] = v
			}
		}
		if !maps.Equal(got, step.want) {
			t.Errorf("%v: kfsm's annotations are %v, want %v", step.args, got, step.want)
		}
	}
}

// watch prints each new transition once, as it is recorded.
func TestWatchPrintsEachNewTransition(t *testing.T) {
	h := newHerd(t)
	out, stop := h.watch(t, "moose", "moose-01")
	m := &v1alpha1.Moose{}
	if err := h.env.Client.Get(t.Context(), client.ObjectKey{Namespace: h.env.Namespace, Name: "moose-02"}, m); err != nil {
		t.Fatal(err)
	}
	moved := metav1.NewTime(now.Add(time.Minute))
	m.Status.History = append(m.Status.History, fsm.Transition{From: moose.Sleeping, To: moose.Roaming, Reason: "Next", Time: moved})
	m.Status.State = moose.Roaming
	if err := h.env.Client.Status().Update(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	// A change that records no transition prints nothing.
	m.Status.Meals = 3
	if err := h.env.Client.Status().Update(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	// A transition in the same second as the last, written apart from it
	// (the history's times are of seconds), is printed too.
	m.Status.History = append(m.Status.History, fsm.Transition{From: moose.Roaming, To: moose.Eating, Reason: "Next", Time: moved})
	m.Status.State = moose.Eating
	if err := h.env.Client.Status().Update(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	at := moved.Local().Format("15:04:05") + "  " + h.env.Namespace + "/moose-02  "
	want := at + "Sleeping → Roaming  Next\n" + at + "Roaming → Eating  Next\n"
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "Eating") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // for anything more that it would print
	if got := stop(); got != want {
		t.Errorf("watch printed\n%q\nwant\n%q", got, want)
	}
}

// watch starts kubectl fsm watch RESOURCE in the herd's namespace and
// returns once it watches: until it prints a transition that the test
// records on probe, a transition from and to probe's state, made anew
// each time it was not printed. stop stops the watch and returns what it
// printed after the probe's line.
//
// A watch that lists after a change does not print it: the list has it.
// Under load, the command can take seconds to get there.
func (h *herd) watch(t *testing.T, resource, probe string) (out *kubectlfsm.SyncBuffer, stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out = &kubectlfsm.SyncBuffer{}
	root := kubectlfsm.NewPluginCommand(&kubectlfsm.Options{})
	root.SetOut(out)
	root.SetArgs([]string{"--kubeconfig", h.kubeconfig, "-n", h.env.Namespace, "watch", resource})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	end := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch ended with %v", err)
		}
	}
	// The watch prints, on an event, every transition newer than the last
	// it knew: once it prints the latest probe, no earlier probe follows.
	for i, deadline := 1, time.Now().Add(time.Minute); ; i++ {
		m := &v1alpha1.Moose{}
		if err := h.env.Client.Get(t.Context(), client.ObjectKey{Namespace: h.env.Namespace, Name: probe}, m); err != nil {
			end()
			t.Fatal(err)
		}
		reason := fmt.Sprintf("Probe%d", i)
		m.Status.History = append(m.Status.History, fsm.Transition{From: m.Status.State, To: m.Status.State, Reason: reason, Time: metav1.NewTime(time.Now())})
		if err := h.env.Client.Status().Update(t.Context(), m); err != nil {
			end()
			t.Fatal(err)
		}
		for wait := time.Now().Add(time.Second); time.Now().Before(wait) && !strings.Contains(out.String(), reason+"\n"); {
			time.Sleep(20 * time.Millisecond)
		}
		if printed := out.String(); strings.HasSuffix(printed, reason+"\n") {
			return out, func() string {
				end()
				return strings.TrimPrefix(out.String(), printed)
			}
		}
		if time.Now().After(deadline) {
			end()
			t.Fatalf("kubectl fsm watch %s printed no probe of %s in a minute:\n%s", resource, probe, out.String())
		}
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run with -update to accept):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

// writeKubeconfig writes a kubeconfig for the test's cluster user, or
// for as when it is given, whom that user impersonates.
func writeKubeconfig(t *testing.T, e *fsmtest.Env, as ...string) string {
	t.Helper()
	cfg := e.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	if len(as) > 0 {
		kc.AuthInfos["test"].Impersonate = as[0]
	}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: "default"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func ptr[T any](v T) *T { return &v }

func micro(t metav1.Time) metav1.MicroTime { return metav1.MicroTime(t) }

// With only the permissions that the fsm package doc lists, the operator
// runs and writes nothing on its CRD, which carries the machine's graph as
// installed; someone with only read access sees it with kubectl fsm, and
// may not turn its knobs.
func TestWithOnlyTheDocumentedPermissions(t *testing.T) {
	e := fsmtest.New(t)
	ctx := t.Context()
	crd := "moose.examples.kfsm.dev"
	key, want, err := moose.NewHerd(1).Machine().GraphAnnotation(fsm.PublishedResource{
		Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "Moose", Resource: "moose"})
	if err != nil {
		t.Fatal(err)
	}
	annotation := func() string {
		t.Helper()
		out, err := e.Kubectl("get", "crd", crd, "-o", "go-template={{index .metadata.annotations \""+key+"\"}}")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The graph that make generate wrote; the version of kfsm is the one
	// that wrote it.
	var got, machine fsm.PublishedGraph
	if err := json.Unmarshal([]byte(annotation()), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &machine); err != nil {
		t.Fatal(err)
	}
	got.KfsmVersion, machine.KfsmVersion = "", ""
	if diff := cmp.Diff(machine, got); diff != "" {
		t.Fatalf("the moose CRD as installed does not carry the machine's graph (make generate writes it) (-machine +CRD):\n%s", diff)
	}
	group := v1alpha1.GroupVersion.Group
	rules := func(rs ...rbacv1.PolicyRule) []rbacv1.PolicyRule { return rs }
	grant(t, e, "moose-operator", rules(
		rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{"moose"}, Verbs: []string{"get", "list", "watch", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{"moose/status"}, Verbs: []string{"patch"}},
		rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{"moose/finalizers"}, Verbs: []string{"update"}},
		rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	), rules(
		rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, ResourceNames: []string{crd}, Verbs: []string{"get"}},
	))
	grant(t, e, "moose-viewer", rules(
		rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{"moose"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"list"}},
	), rules(
		rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get"}},
	))

	cfg := e.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "moose-operator"}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{e.Namespace: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := moose.NewHerd(1).Machine().SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	opCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(opCtx) }()
	defer func() {
		stop()
		if err := <-stopped; err != nil {
			t.Errorf("the operator: %v", err)
		}
	}()
	m := &v1alpha1.Moose{ObjectMeta: metav1.ObjectMeta{Name: "moose-rbac"}, Spec: v1alpha1.MooseSpec{Weight: 400}}
	e.Create(m)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got := &v1alpha1.Moose{}
		_ = e.Client.Get(ctx, client.ObjectKeyFromObject(m), got)
		if got.Status.State == moose.Roaming {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with its documented permissions, the operator did not move the moose to Roaming in a minute: state %q", got.Status.State)
		}
	}

	viewer := writeKubeconfig(t, e, "moose-viewer")
	h := &herd{env: e, kubeconfig: viewer}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"graph", "moose"}, "machine moose (examples.kfsm.dev/v1alpha1 Moose, Lifecycle mode)"},
		{[]string{"get", "moose"}, "moose-rbac  Roaming"},
		{[]string{"describe", "moose/moose-rbac"}, "(new) → Tagged"},
		{[]string{"pause", "moose/moose-rbac"}, `cannot patch resource "moose"`},
	} {
		out, err := h.run(t, c.args...)
		if err != nil {
			out += "error: " + err.Error()
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("kubectl fsm %s as a viewer:\n%s\nwant it to say %q", strings.Join(c.args, " "), out, c.want)
		}
	}
}

// grant gives user the rules in the test's namespace and the cluster
// rules cluster-wide.
func grant(t *testing.T, e *fsmtest.Env, user string, rules, clusterRules []rbacv1.PolicyRule) {
	t.Helper()
	name := e.Namespace + "-" + user
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	e.Create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules})
	e.Create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user}})
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: clusterRules}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
	for _, obj := range []client.Object{cr, crb} {
		if err := e.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Client.Delete(context.Background(), obj) })
	}
}

// docs/operating.md shows get and why as the golden files have them.
func TestDocsShowTheGoldenOutputs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ command, golden string }{
		{"kubectl fsm get moose", "get"},
		{"kubectl fsm why moose/moose-03", "why-stalled"},
	} {
		out, err := os.ReadFile(filepath.Join("testdata", c.golden+".golden"))
		if err != nil {
			t.Fatal(err)
		}
		block := "    $ " + c.command + "\n" + strings.TrimSuffix(indentLines(string(out), "    "), "\n")
		if !strings.Contains(string(doc), block) {
			t.Errorf("docs/operating.md does not show %q as testdata/%s.golden has it:\n%s", c.command, c.golden, block)
		}
	}
}

func indentLines(s, by string) string {
	var b strings.Builder
	for line := range strings.SplitAfterSeq(s, "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString(by)
		}
		b.WriteString(line)
	}
	return b.String()
}

// kubectl fsm get shows, for a sharded machine, the replica whose Lease
// holds each object's slot.
func TestGetShowsTheReplicaOfASharedObject(t *testing.T) {
	h := newHerd(t)
	holders := map[string]string{}
	for i, half := range []string{"0-31", "32-63"} {
		name := fmt.Sprintf("replica-%d", i)
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "moose-" + name,
				Labels:      map[string]string{sharding.LabelShards: "moose"},
				Annotations: map[string]string{sharding.AnnotationSlots: half, sharding.AnnotationMachines: "moose"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &name},
		}
		h.env.Create(l)
		// Leases are read in every namespace: they must not outlive the
		// test, whose namespace goes slowly.
		t.Cleanup(func() { _ = h.env.Client.Delete(context.Background(), l) })
		holders[half] = name
	}
	out, err := h.run(t, "get", "moose")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "NAME ") || !strings.Contains(strings.SplitN(out, "\n", 2)[0], "REPLICA") {
		t.Fatalf("get has no REPLICA column:\n%s", out)
	}
	for _, name := range []string{"moose-01", "moose-02", "moose-03", "moose-04"} {
		holder := holders["0-31"]
		if sharding.SlotOf(types.UID(h.uid(t, name))) >= 32 {
			holder = holders["32-63"]
		}
		if row := regexp.MustCompile(`(?m)^` + name + ` .* ` + holder + `$`); !row.MatchString(out) {
			t.Errorf("%s's row does not end with %s:\n%s", name, holder, out)
		}
	}
}
