package fsm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
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
		WithTracerProvider(spans).
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

func (t recordingTracer) Start(ctx context.Context, name string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	t.r.mu.Lock()
	t.r.ids++
	var id trace.SpanID
	binary.BigEndian.PutUint64(id[:], t.r.ids)
	t.r.mu.Unlock()
	s := &recordedSpan{r: t.r, name: name, parent: trace.SpanContextFromContext(ctx).SpanID(),
		sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: id})}
	return trace.ContextWithSpan(ctx, s), s
}

type recordedSpan struct {
	noop.Span
	r      *spanRecorder
	name   string
	parent trace.SpanID
	sc     trace.SpanContext
	code   codes.Code
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
