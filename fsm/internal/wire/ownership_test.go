package wire

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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

func TestRefused(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	cases := map[string]struct {
		err  error
		want bool
	}{
		"Conflict":         {err: apierrors.NewConflict(cm, "g", errors.New("the object has been modified")), want: true},
		"Wrapped":          {err: fmt.Errorf("patching: %w", apierrors.NewNotFound(cm, "g")), want: true},
		"FailedTest":       {err: apierrors.NewGenericServerResponse(422, "patch", cm, "g", "testing value failed", 0, false), want: true},
		"InternalError":    {err: apierrors.NewInternalError(errors.New("etcdserver: request timed out"))},
		"ServerTimeout":    {err: apierrors.NewTimeoutError("the request took too long", 0)},
		"NoAnswer":         {err: &url.Error{Op: "Patch", URL: "https://api/configmaps/g", Err: errors.New("cut off: this process may no longer hold its Lease")}},
		"ContextCancelled": {err: context.DeadlineExceeded},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := refused(tc.err); got != tc.want {
				t.Errorf("refused(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
