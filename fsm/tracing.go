package fsm

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
)

// The attributes of kfsm's spans: the OpenTelemetry semantic conventions'
// where they name the thing (k8s.namespace.name), and kfsm's own under
// kfsm.* where they do not (a custom resource has no k8s.* name).
const (
	attrMachine        = attribute.Key("kfsm.machine")
	attrObjectKind     = attribute.Key("kfsm.object.kind")
	attrObjectName     = attribute.Key("kfsm.object.name")
	attrState          = attribute.Key("kfsm.state")
	attrTransitionFrom = attribute.Key("kfsm.transition.from")
	attrTransitionTo   = attribute.Key("kfsm.transition.to")
	attrTransitionWhy  = attribute.Key("kfsm.transition.reason")
	// eventTransition names the span event of a committed transition.
	eventTransition = "kfsm.transition"
)

// reconcileSpan starts the span of a reconcile of obj.
func (r *reconciler[T]) reconcileSpan(ctx context.Context, obj types.NamespacedName) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attrMachine.String(r.m.name), attrObjectKind.String(r.gvk.Kind), attrObjectName.String(obj.Name)}
	if obj.Namespace != "" {
		attrs = append(attrs, semconv.K8SNamespaceName(obj.Namespace))
	}
	return r.b.tracer.Start(ctx, "kfsm.Reconcile", trace.WithAttributes(attrs...))
}

// linkLastTransition links a reconcile's span to that of the reconcile
// that made the object's last transition, which its status keeps: the
// reconciles of one object are tied together across time, and across
// processes.
func linkLastTransition(span trace.Span, st *Status) {
	if len(st.History) == 0 {
		return
	}
	if sc, ok := parseTraceParent(st.History[len(st.History)-1].TraceParent); ok {
		span.AddLink(trace.Link{SpanContext: sc})
	}
}

// traceParent formats sc as a W3C traceparent, or returns "" if it is not
// sampled.
func traceParent(sc trace.SpanContext) string {
	if !sc.IsSampled() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c.Get("traceparent")
}

// parseTraceParent reads what traceParent wrote.
func parseTraceParent(s string) (trace.SpanContext, bool) {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// spanTransition records a committed transition as an event of the
// reconcile's span.
func spanTransition(span trace.Span, t Transition) {
	span.AddEvent(eventTransition, trace.WithAttributes(
		attrTransitionFrom.String(string(t.From)), attrTransitionTo.String(string(t.To)), attrTransitionWhy.String(t.Reason)))
}
