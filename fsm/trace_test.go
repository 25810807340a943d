package fsm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestSpanPerReconcileWithAChildPerState(t *testing.T) {
	e := newEnv(t)
	spans := &spanRecorder{}
	m := fsm.New[*gadget]("traced", fsm.Lifecycle).
		Tune(fsm.Tuning{TracerProvider: spans}).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", func(context.Context, *request) fsm.Result { return fsm.Fail(errors.New("no luck")) }, fsm.To("C")).
		State("C", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	if f := e.fail(r); f.State != "B" {
		t.Errorf("the failure is in state %s, want B", f.State)
	}

	ended := spans.all()
	var names []string
	for _, s := range ended {
		names = append(names, s.name)
	}
	if diff := cmp.Diff([]string{"kfsm.State A", "kfsm.State B", "kfsm.Reconcile"}, names); diff != "" {
		t.Fatalf("spans (-want +got):\n%s", diff)
	}
	root := ended[2]
	for _, child := range ended[:2] {
		if child.parent != root.sc.SpanID() {
			t.Errorf("span %q is not a child of the reconcile span", child.name)
		}
	}
	if got := ended[1].code; got != codes.Error {
		t.Errorf("the failed state's span has status %v, want Error", got)
	}
}

// Span attributes follow the OpenTelemetry semantic conventions: a k8s.*
// key is one the conventions define, and kfsm's own are under kfsm.*.
// Each committed transition is an event of its reconcile's span, and a
// later reconcile of the object links to the span of the reconcile that
// made the object's last transition, which the status keeps.
func TestSpansFollowTheConventionsAndLinkAnObjectsReconciles(t *testing.T) {
	e := newEnv(t)
	spans := &spanRecorder{}
	m := fsm.New[*gadget]("linked", fsm.Lifecycle).
		Tune(fsm.Tuning{TracerProvider: spans}).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", func(_ context.Context, r *request) fsm.Result {
			if r.Object.Spec.Mode != "go" {
				return fsm.Wait(0, "Waiting")
			}
			return fsm.Next("C")
		}, fsm.To("C")).
		State("C", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	first := spans.all()
	firstReconcile := first[len(first)-1]
	var moves []string
	for _, ev := range firstReconcile.events {
		if ev.name == "kfsm.transition" {
			moves = append(moves, attr(ev.attrs, "kfsm.transition.from")+"→"+attr(ev.attrs, "kfsm.transition.to")+" "+attr(ev.attrs, "kfsm.transition.reason"))
		}
	}
	if diff := cmp.Diff([]string{"→A Created", "A→B Next"}, moves); diff != "" {
		t.Errorf("transition events of the first reconcile (-want +got):\n%s", diff)
	}
	h := e.get("g").Status.History
	want := "00-" + firstReconcile.sc.TraceID().String() + "-" + firstReconcile.sc.SpanID().String() + "-01"
	if got := h[len(h)-1].TraceParent; got != want {
		t.Errorf("the last transition's traceParent is %q, want the first reconcile's span, %q", got, want)
	}

	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "go" })
	e.reconcile(r, "g")
	all := spans.all()
	second := all[len(all)-1]
	if len(second.links) != 1 || second.links[0].SpanContext.SpanID() != firstReconcile.sc.SpanID() || second.links[0].SpanContext.TraceID() != firstReconcile.sc.TraceID() {
		t.Errorf("the second reconcile's links are %v, want one to the first reconcile's span %v", second.links, firstReconcile.sc.SpanID())
	}

	if got := attr(second.attrs, "k8s.namespace.name"); got != e.namespace {
		t.Errorf("k8s.namespace.name = %q, want %q", got, e.namespace)
	}
	if got := attr(second.attrs, "kfsm.object.name") + " " + attr(second.attrs, "kfsm.object.kind") + " " + attr(second.attrs, "kfsm.machine"); got != "g Gadget linked" {
		t.Errorf("kfsm.object.name, kfsm.object.kind and kfsm.machine are %q, want g Gadget linked", got)
	}
	for _, s := range all {
		if strings.HasPrefix(s.name, "kfsm.State ") && attr(s.attrs, "kfsm.state") != strings.TrimPrefix(s.name, "kfsm.State ") {
			t.Errorf("span %q has kfsm.state %q", s.name, attr(s.attrs, "kfsm.state"))
		}
		keys := slices.Clone(s.attrs)
		for _, ev := range s.events {
			keys = append(keys, ev.attrs...)
		}
		for _, kv := range keys {
			k := string(kv.Key)
			if strings.HasPrefix(k, "k8s.") && !semconvK8s[k] || !strings.HasPrefix(k, "k8s.") && !strings.HasPrefix(k, "kfsm.") {
				t.Errorf("span %q has attribute %s, which is neither a k8s.* key of the semantic conventions nor kfsm's own", s.name, k)
			}
		}
	}
}

// semconvK8s are the k8s.* attribute keys that the OpenTelemetry semantic
// conventions (v1.41.0) define for spans and resources.
var semconvK8s = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`k8s.cluster.name k8s.cluster.uid k8s.container.name k8s.container.restart_count
		k8s.cronjob.name k8s.cronjob.uid k8s.daemonset.name k8s.daemonset.uid k8s.deployment.name k8s.deployment.uid
		k8s.job.name k8s.job.uid k8s.namespace.name k8s.node.name k8s.node.uid k8s.pod.name k8s.pod.uid
		k8s.replicaset.name k8s.replicaset.uid k8s.statefulset.name k8s.statefulset.uid`) {
		semconvK8s[k] = true
	}
}

// spanRecorder is a tracer provider, on OpenTelemetry's API alone, that
// keeps the spans that ended: their names, parents and status codes.
type spanRecorder struct {
	noop.TracerProvider
	mu    sync.Mutex
	ended []*recordedSpan
	ids   uint64
}

func (r *spanRecorder) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return recordingTracer{r: r}
}

func (r *spanRecorder) all() []*recordedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*recordedSpan(nil), r.ended...)
}

type recordingTracer struct {
	noop.Tracer
	r *spanRecorder
}

func (t recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	t.r.mu.Lock()
	t.r.ids++
	var id trace.SpanID
	binary.BigEndian.PutUint64(id[:], t.r.ids)
	t.r.mu.Unlock()
	cfg := trace.NewSpanStartConfig(opts...)
	s := &recordedSpan{r: t.r, name: name, parent: trace.SpanContextFromContext(ctx).SpanID(),
		sc:    trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: id, TraceFlags: trace.FlagsSampled}),
		attrs: cfg.Attributes(), links: cfg.Links()}
	return trace.ContextWithSpan(ctx, s), s
}

type recordedSpan struct {
	noop.Span
	r      *spanRecorder
	name   string
	parent trace.SpanID
	sc     trace.SpanContext
	code   codes.Code
	attrs  []attribute.KeyValue
	events []spanEvent
	links  []trace.Link
}

type spanEvent struct {
	name  string
	attrs []attribute.KeyValue
}

func (s *recordedSpan) SetAttributes(kv ...attribute.KeyValue) { s.attrs = append(s.attrs, kv...) }
func (s *recordedSpan) AddLink(l trace.Link)                   { s.links = append(s.links, l) }
func (s *recordedSpan) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.events = append(s.events, spanEvent{name: name, attrs: cfg.Attributes()})
}

// attr returns the value of the attribute key, or "".
func attr(attrs []attribute.KeyValue, key string) string {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func (s *recordedSpan) SpanContext() trace.SpanContext { return s.sc }
func (s *recordedSpan) IsRecording() bool              { return true }
func (s *recordedSpan) SetStatus(c codes.Code, _ string) {
	s.code = c
}

func (s *recordedSpan) End(...trace.SpanEndOption) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.ended = append(s.r.ended, s)
}
