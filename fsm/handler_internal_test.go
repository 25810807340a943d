package fsm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
)

// promotedObject's status embeds Status and has no DeepCopy of its own:
// the DeepCopy that its status type has is Status's, promoted, which
// copies only the embedded part.
type promotedObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            promotedStatus `json:"status,omitempty"`
}

type promotedStatus struct {
	Status `json:",inline"`
	Notes  []string `json:"notes,omitempty"`
}

func (o *promotedObject) FSMStatus() *Status { return &o.Status.Status }

func (o *promotedObject) DeepCopyObject() runtime.Object {
	c := &promotedObject{TypeMeta: o.TypeMeta}
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	o.Status.Status.DeepCopyInto(&c.Status.Status)
	c.Status.Notes = append([]string(nil), o.Status.Notes...)
	return c
}

// A refused transition discards what the handler wrote in the status,
// also for a status type whose only DeepCopy is the promoted one of
// Status, whether the refusing handler ran first in the walk or later.
func TestARefusedTransitionDiscardsTheHandlersStatusWithAPromotedDeepCopy(t *testing.T) {
	for name, tc := range map[string]struct {
		initial State
		want    []string
	}{
		"TheFirstHandlerRefused": {initial: "Refuse", want: []string{"before"}},
		"ALaterHandlerRefused":   {initial: "Start", want: []string{"before", "start"}},
	} {
		t.Run(name, func(t *testing.T) {
			note := func(s string, res Result) Handler[*promotedObject] {
				return func(_ context.Context, r *Request[*promotedObject]) Result {
					r.Object.Status.Notes = append(r.Object.Status.Notes, s)
					return res
				}
			}
			m := New[*promotedObject]("promoted", Lifecycle).
				Tune(Tuning{TracerProvider: noop.NewTracerProvider()}).
				Initial(tc.initial).
				State("Start", note("start", Next("Refuse")), To("Refuse")).
				State("Refuse", note("refuse", Next("Nowhere")), To("End", "Start")).
				State("End", nil, Final())
			if err := m.Build(); err != nil {
				t.Fatal(err)
			}
			r, err := newReconciler(m, nil, nil, nopRecorder{})
			if err != nil {
				t.Fatal(err)
			}
			obj := &promotedObject{ObjectMeta: metav1.ObjectMeta{Name: "o", Namespace: "ns", Generation: 1}}
			obj.Status.Notes = []string{"before"}
			before := obj.DeepCopyObject().(*promotedObject)
			r.walk(logr.NewContext(context.Background(), logr.Discard()), obj, before, false)

			if got := obj.Status.Notes; !slices.Equal(got, tc.want) {
				t.Errorf("notes %q after the refusal, want %q", got, tc.want)
			}
			c := meta.FindStatusCondition(obj.Status.Conditions, ConditionStalled)
			if c == nil || c.Reason != ReasonIllegalTransition {
				t.Errorf("Stalled = %+v, want reason %s", c, ReasonIllegalTransition)
			}
		})
	}
}

// When the status is kfsm's Status alone, a refused transition has nothing
// of the author's to discard: the walk skips the copies and leaves the same
// status as a walk that makes them.
func TestARefusedTransitionLeavesTheSameStatusWhenTheStatusIsKfsmsAlone(t *testing.T) {
	walk := func(copies bool) Status {
		m := New[*benchObject]("alone", Lifecycle).
			Tune(Tuning{TracerProvider: noop.NewTracerProvider()}).
			WithClock(clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))).
			Initial("Start").
			State("Start", func(context.Context, *Request[*benchObject]) Result { return Next("Refuse") }, To("Refuse")).
			State("Refuse", func(context.Context, *Request[*benchObject]) Result { return Next("Nowhere") }, To("End")).
			State("End", nil, Final())
		if err := m.Build(); err != nil {
			t.Fatal(err)
		}
		if !m.built.kfsmsOnly {
			t.Fatal("a status of type Status is not seen as kfsm's alone")
		}
		m.built.kfsmsOnly = !copies
		r, err := newReconciler(m, nil, nil, nopRecorder{})
		if err != nil {
			t.Fatal(err)
		}
		obj := &benchObject{ObjectMeta: metav1.ObjectMeta{Name: "o", Namespace: "ns", Generation: 1}}
		r.walk(logr.NewContext(context.Background(), logr.Discard()), obj, obj.DeepCopyObject().(*benchObject), false)
		return obj.Status
	}
	skipped, copied := walk(false), walk(true)
	if diff := cmp.Diff(copied, skipped, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
		t.Errorf("the status without the copies differs from the one with them (-with +without):\n%s", diff)
	}
	if c := meta.FindStatusCondition(skipped.Conditions, ConditionStalled); c == nil || c.Reason != ReasonIllegalTransition {
		t.Errorf("Stalled = %+v, want reason %s", c, ReasonIllegalTransition)
	}
}

// recordingSpan is a span that records, as an SDK's does.
type recordingSpan struct {
	noop.Span
	sc trace.SpanContext
}

func (s recordingSpan) SpanContext() trace.SpanContext { return s.sc }
func (s recordingSpan) IsRecording() bool              { return true }

// Under a noop tracer, kfsm starts no span where the one in ctx records
// nothing: a handler finds in its ctx a span as the noop tracer's spans
// would be, whatever span the reconcile's ctx holds.
func TestUnderANoopTracerAHandlerSeesTheSpanANoopSpanWouldBe(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	for name, parent := range map[string]context.Context{
		"NoSpan":           context.Background(),
		"ARemoteSpan":      trace.ContextWithRemoteSpanContext(context.Background(), sc),
		"ASpanThatRecords": trace.ContextWithSpan(context.Background(), recordingSpan{sc: sc}),
	} {
		t.Run(name, func(t *testing.T) {
			var seen trace.Span
			c := benchClient()
			m := New[*benchObject]("noop", Lifecycle).
				Tune(Tuning{TracerProvider: noop.NewTracerProvider()}).
				Initial("Ready").
				State("Ready", func(ctx context.Context, _ *Request[*benchObject]) Result {
					seen = trace.SpanFromContext(ctx)
					return Done()
				}, Final())
			if err := m.Build(); err != nil {
				t.Fatal(err)
			}
			r, err := newReconciler(m, c, c, nopRecorder{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Reconcile(logr.NewContext(parent, logr.Discard()), benchRequest); err != nil {
				t.Fatal(err)
			}
			ctx, _ := noop.Tracer{}.Start(parent, "kfsm.Reconcile")
			_, want := noop.Tracer{}.Start(ctx, "kfsm.State Ready")
			if !seen.SpanContext().Equal(want.SpanContext()) || seen.IsRecording() != want.IsRecording() {
				t.Errorf("the handler's span has context %v and records %t, want %v and %t", seen.SpanContext(), seen.IsRecording(), want.SpanContext(), want.IsRecording())
			}
		})
	}
}

// A walk's state is reused once the walk is released, its Request is not:
// a Request that a handler kept still holds its own object after another
// walk, and its methods, called after the release, panic with a message
// that says why instead of acting on that other walk.
func TestARequestKeptPastItsWalkHoldsItsObjectAndRefusesItsMethods(t *testing.T) {
	var kept []*Request[*benchObject]
	m := New[*benchObject]("keeps", Lifecycle).
		Tune(Tuning{TracerProvider: noop.NewTracerProvider()}).
		Initial("A").
		State("A", func(_ context.Context, r *Request[*benchObject]) Result {
			kept = append(kept, r)
			return Wait(0, "Kept")
		}, To("B")).
		State("B", nil, Final())
	if err := m.Build(); err != nil {
		t.Fatal(err)
	}
	r, err := newReconciler(m, nil, nil, nopRecorder{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := logr.NewContext(context.Background(), logr.Discard())
	for _, name := range []string{"first", "second"} {
		obj := &benchObject{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		w := r.walk(ctx, obj, obj.DeepCopyObject().(*benchObject), false)
		w.commit()
		w.release()
	}
	if len(kept) != 2 || kept[0] == kept[1] || kept[0].Object.Name != "first" || kept[1].Object.Name != "second" {
		t.Fatalf("the kept Requests are %v: want one of its own for each walk, holding its object", kept)
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "used after its reconcile ended") {
			t.Errorf("Event on a Request whose walk ended: panic %v, want one that says the Request was used after its reconcile ended", p)
		}
	}()
	kept[0].Event("Normal", "Late", "after the walk")
}
