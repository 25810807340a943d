package fsm

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// BenchmarkActionLife is one action's life on one object, through a fake
// client: the reconcile that asks for the action (and records its
// intent), the run, and the reconcile that takes its outcome and moves on,
// back to the state that asks for it again. writes/op counts the status
// writes of one life; the time is the two reconciles' and the run's.
func BenchmarkActionLife(b *testing.B) {
	c := &statusCounter{Client: benchClient()}
	ended := make(chan struct{}, 1)
	m := New[*benchObject]("actions", Lifecycle).
		Tune(Tuning{TracerProvider: noop.NewTracerProvider()}).
		Initial("Work").
		State("Work", func(_ context.Context, r *Request[*benchObject]) Result {
			switch a := r.Action("work", benchWork); a.State {
			case ActionPending:
				return Wait(0, "Working")
			case ActionFailed:
				return Fail(a.Err)
			}
			return Next("Rest")
		}, To("Rest")).
		State("Rest", func(context.Context, *Request[*benchObject]) Result { return Next("Work") }, To("Work")).
		Observe(Observers[*benchObject]{Action: func(_ types.NamespacedName, _ string, a Action) {
			if a.State != ActionPending {
				ended <- struct{}{}
			}
		}})
	if err := m.Build(); err != nil {
		b.Fatal(err)
	}
	r, err := newReconciler(m, c, c, nopRecorder{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := logr.NewContext(context.Background(), logr.Discard())
	if _, err := r.Reconcile(ctx, benchRequest); err != nil { // the first intent
		b.Fatal(err)
	}
	c.writes.Store(0)
	b.ReportAllocs()
	for b.Loop() {
		<-ended
		for range 2 { // the outcome, then the next intent
			if _, err := r.Reconcile(ctx, benchRequest); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(c.writes.Load())/float64(b.N), "writes/op")
}

// statusCounter counts the status writes made through it.
type statusCounter struct {
	client.Client
	writes atomic.Int64
}

func (c *statusCounter) Status() client.SubResourceWriter {
	return countedStatus{c.Client.Status(), &c.writes}
}

type countedStatus struct {
	client.SubResourceWriter
	n *atomic.Int64
}

func (s countedStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.n.Add(1)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (s countedStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.n.Add(1)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}
