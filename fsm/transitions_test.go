package fsm_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestTransitionsAreLogged(t *testing.T) {
	e := newEnv(t)
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	m := fsm.New[*gadget]("logged", fsm.Lifecycle).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	ctx := logr.NewContext(t.Context(), logger)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: e.namespace, Name: "g"}}); err != nil {
		t.Fatal(err)
	}
	want := `"level"=0 "msg"="transition" "machine"="logged" "object"="` + e.namespace + `/g" "from"="A" "to"="B" "reason"="Next"`
	if !slices.Contains(lines, want) {
		t.Errorf("no log line %s; lines:\n%s", want, strings.Join(lines, "\n"))
	}
}

// History keeps the latest transitions, and always the latest one, which
// Request.From reads.
func TestHistoryKeepsTheLatestTransitions(t *testing.T) {
	cases := map[string]struct {
		reason  string
		limit   int
		history []string
		from    []fsm.State
	}{
		"Two": {
			reason: "three reconciles: Ping, Pong | Ping, Pong | Ping, Pong, then Ping",
			limit:  2, history: []string{"Ping>Pong", "Pong>Ping"},
			from: []fsm.State{"", "Ping", "Pong", "Ping", "Pong", "Ping"},
		},
		"One": {
			reason: "HistoryLimit 1 keeps the latest transition only",
			limit:  1, history: []string{"Pong>Ping"},
			from: []fsm.State{"", "Ping", "Pong", "Ping", "Pong", "Ping"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			var from []fsm.State
			m := fsm.New[*gadget]("history-"+strings.ToLower(name), fsm.Lifecycle).
				Tune(fsm.Tuning{HistoryLimit: tc.limit}).
				Initial("Ping").
				State("Ping", func(_ context.Context, r *request) fsm.Result { from = append(from, r.From); return fsm.Next("Pong") }, fsm.To("Pong")).
				State("Pong", func(_ context.Context, r *request) fsm.Result { from = append(from, r.From); return fsm.Next("Ping") }, fsm.To("Ping"))
			r := e.reconciler(m)
			e.gadget("g", v1alpha1.GadgetSpec{})
			for range 3 {
				e.reconcile(r, "g")
			}
			var got []string
			for _, h := range e.get("g").Status.History {
				got = append(got, string(h.From)+">"+string(h.To))
			}
			if diff := cmp.Diff(tc.history, got); diff != "" {
				t.Errorf("%s: history (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.from, from); diff != "" {
				t.Errorf("%s: Request.From (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// Guarantee 9: a transition whose status write meets a conflict is
// reported once, when it is written: one event, one log line, one count.
func TestUnderManagerAConflictReportsATransitionOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("conflict-once", fsm.Lifecycle).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", done, fsm.Final())
	l := run(e, m)
	l.inject(&fault{op: "status", times: 1, err: apierrors.NewConflict(schema.GroupResource{Resource: "gadgets"}, "g", errors.New("injected"))})
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready, and the Events of its transitions", func() bool {
		events := e.apiEvents()
		return e.ready("g") && occurrences(events, fsm.ReasonNext) > 0 && occurrences(events, fsm.ReasonCreated) > 0
	})
	time.Sleep(2 * time.Second) // and nothing after

	if n := l.status.Load(); n != 1 {
		t.Fatalf("%d status writes went through, want 1 after the conflict", n)
	}
	events := e.apiEvents()
	if n := occurrences(events, fsm.ReasonNext); n != 1 {
		t.Errorf("%d events of the transition A→B, want 1", n)
	}
	if n := occurrences(events, fsm.ReasonCreated); n != 1 {
		t.Errorf("%d events of the transition into A, want 1", n)
	}
	var lines int
	for _, line := range l.logs.all() {
		if line.msg == "transition" && line.value("to") == "B" {
			lines++
		}
	}
	if lines != 1 {
		t.Errorf("%d transition log lines for A→B, want 1", lines)
	}
	if n := metricValue(t, "kfsm_transitions_total", map[string]string{"machine": "conflict-once", "from": "A", "to": "B", "reason": fsm.ReasonNext}); n != 1 {
		t.Errorf("kfsm_transitions_total{A→B} = %v, want 1", n)
	}
	for _, line := range l.logs.errors() {
		t.Errorf("a conflict was logged as an error: %s", line)
	}
}

// Guarantee 9: nine transitions are nine events that kubectl get events
// tells apart, the moves that kfsm forced among them as warnings.
func TestUnderManagerEveryTransitionIsADistinctEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var built atomic.Int32
	m := fsm.New[*gadget]("nine", fsm.Lifecycle).
		Initial("Intake").
		State("Intake", next("Check"), fsm.To("Check")).
		State("Check", next("Queue"), fsm.To("Queue")).
		State("Queue", func(context.Context, *request) fsm.Result { return fsm.Wait(0, "Queued") },
			fsm.To("Build"), fsm.Timeout(time.Second, "Build")).
		State("Build", func(context.Context, *request) fsm.Result {
			if built.Add(1) == 1 {
				return fsm.Fail(errors.New("flaky builder"))
			}
			return fsm.Next("Test")
		}, fsm.To("Test"), fsm.RetriesThen(1, "Test")).
		State("Test", next("Stage"), fsm.To("Stage")).
		State("Stage", next("Canary"), fsm.To("Canary")).
		State("Canary", next("Release"), fsm.To("Release")).
		State("Release", next("Done"), fsm.To("Done")).
		State("Done", done, fsm.Final())
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready, and the Events of its nine transitions", func() bool {
		moves := 0
		for _, ev := range e.apiEvents() {
			if strings.Contains(ev.Note, "moved from") || strings.Contains(ev.Note, "started in") {
				moves++
			}
		}
		return e.ready("g") && moves >= 9
	})
	time.Sleep(2 * time.Second) // and nothing after

	out, err := e.fe.Kubectl("get", "events", "--field-selector", "involvedObject.name=g", "--no-headers",
		"-o", "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var transitions []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || (!strings.Contains(line, "moved from") && !strings.Contains(line, "started in")) {
			continue
		}
		transitions = append(transitions, line)
		message := strings.Join(fields[2:], " ")
		if seen[message] {
			t.Errorf("two events read %q", message)
		}
		seen[message] = true
		wantType := corev1.EventTypeNormal
		if fields[1] == fsm.ReasonTimeout || fields[1] == fsm.ReasonRetriesExhausted {
			wantType = corev1.EventTypeWarning
		}
		if fields[0] != wantType {
			t.Errorf("event %q is %s, want %s", line, fields[0], wantType)
		}
	}
	t.Logf("kubectl get events:\n%s", out)
	if len(transitions) != 9 {
		t.Errorf("kubectl get events shows %d transitions, want 9:\n%s", len(transitions), out)
	}
	for _, reason := range []string{fsm.ReasonTimeout, fsm.ReasonRetriesExhausted} {
		if !strings.Contains(out, reason) {
			t.Errorf("no %s transition in:\n%s", reason, out)
		}
	}
}
