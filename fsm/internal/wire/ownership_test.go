package wire

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestHeldByUpdate(t *testing.T) {
	cases := map[string]struct {
		fields []metav1.ManagedFieldsEntry
		want   bool
	}{
		"Created":         {fields: []metav1.ManagedFieldsEntry{{Manager: "kfsm-web", Operation: metav1.ManagedFieldsOperationUpdate}}, want: true},
		"Applied":         {fields: []metav1.ManagedFieldsEntry{{Manager: "kfsm-web", Operation: metav1.ManagedFieldsOperationApply}}},
		"AnotherManager":  {fields: []metav1.ManagedFieldsEntry{{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate}}},
		"StatusByUpdate":  {fields: []metav1.ManagedFieldsEntry{{Manager: "kfsm-web", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}}},
		"NoManagedFields": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ManagedFields: tc.fields}}
			if got := heldByUpdate(cm, "kfsm-web"); got != tc.want {
				t.Errorf("heldByUpdate() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConflictsOnlyWithUpdate(t *testing.T) {
	conflict := func(messages ...string) error {
		err := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "g", errors.New("Apply failed"))
		for _, m := range messages {
			err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: m, Field: ".data.k"})
		}
		return err
	}
	cases := map[string]struct {
		err  error
		want bool
	}{
		"ItsOwnUpdate":         {err: conflict(`conflict with "kfsm-web" using v1`), want: true},
		"Wrapped":              {err: fmt.Errorf("applying: %w", conflict(`conflict with "kfsm-web" using v1`, `conflict with "kfsm-web" using v1`)), want: true},
		"AmongOthers":          {err: conflict(`conflict with "kfsm-web" using v1`, `conflict with "team-b"`)},
		"AnotherApplier":       {err: conflict(`conflict with "team-b"`)},
		"AnotherUpdater":       {err: conflict(`conflict with "kubectl-edit" using v1`)},
		"ANameThatBeginsSo":    {err: conflict(`conflict with "kfsm-web-2" using v1`)},
		"NotAConflict":         {err: apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "g")},
		"AConflictWithNoCause": {err: conflict()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := conflictsOnlyWithUpdate(tc.err, "kfsm-web"); got != tc.want {
				t.Errorf("conflictsOnlyWithUpdate(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
