package fsm

import (
	"context"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
				WithTracerProvider(noop.NewTracerProvider()).
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
