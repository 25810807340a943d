package fsm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestSpanPerReconcileWithAChildPerState(t *testing.T) {
	e := newEnv(t)
	spans := tracetest.NewSpanRecorder()
	m := fsm.New[*gadget]("traced", fsm.Lifecycle).
		WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", func(context.Context, *request) fsm.Result { return fsm.Fail(errors.New("no luck")) }, fsm.To("C")).
		State("C", done, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	if f := e.fail(r); f.State != "B" {
		t.Errorf("the failure is in state %s, want B", f.State)
	}

	ended := spans.Ended()
	var names []string
	for _, s := range ended {
		names = append(names, s.Name())
	}
	if diff := cmp.Diff([]string{"kfsm.State A", "kfsm.State B", "kfsm.Reconcile"}, names); diff != "" {
		t.Fatalf("spans (-want +got):\n%s", diff)
	}
	root := ended[2]
	for _, child := range ended[:2] {
		if child.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("span %q is not a child of the reconcile span", child.Name())
		}
	}
	if got := ended[1].Status().Code; got != codes.Error {
		t.Errorf("the failed state's span has status %v, want Error", got)
	}
}
