package fsm

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// failureReason names a failure for conditions and events: child
// problems get reasons of their own, so that they are found by reason.
func failureReason(err error) string {
	var conflict *ConflictError
	var undeclared *UndeclaredOutputError
	var exists *AlreadyExistsError
	var limit *OutputLimitError
	switch {
	case errors.As(err, &conflict):
		return ReasonApplyConflict
	case errors.As(err, &undeclared):
		return ReasonUndeclaredOutput
	case errors.As(err, &exists):
		return ReasonAlreadyExists
	case errors.As(err, &limit):
		return ReasonOutputLimit
	}
	return ReasonHandlerFailed
}

// childRef is an object that events name as related: a child.
func childRef(gvk schema.GroupVersionKind, ref OutputRef) runtime.Object {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID},
	}
}

// related is the child that a handler's failure is about, if any.
func related(err error) runtime.Object {
	var conflict *ConflictError
	var exists *AlreadyExistsError
	switch {
	case errors.As(err, &conflict):
		return childRef(conflict.gvk, conflict.Child)
	case errors.As(err, &exists):
		return childRef(exists.gvk, exists.Child)
	}
	return nil
}

// AlreadyExistsError is what [Request.Apply] returns for a child whose
// name is taken by an object that kfsm did not create for this parent,
// unless the apply passes [Adopt] or [AdoptAndDelete]. Nothing is
// written. The handler's state fails with reason AlreadyExists.
type AlreadyExistsError struct {
	Child OutputRef
	// Owner is the kfsm parent (namespace/name) that the object belongs
	// to, if it belongs to another one.
	Owner string

	gvk schema.GroupVersionKind
}

func (e *AlreadyExistsError) Error() string {
	if e.Owner != "" {
		return fmt.Sprintf("applying %s: it exists and belongs to another parent, %s; choose another name", e.Child, e.Owner)
	}
	return fmt.Sprintf("applying %s: it exists and kfsm did not create it; pass fsm.Adopt() to take it over and never delete it, or fsm.AdoptAndDelete() to make it a child like the others, or choose another name", e.Child)
}

// ConflictError is what [Request.Apply] returns when another server-side
// applier owns fields that the child sets: two declarations disagree, and
// a person must decide. The handler's state then fails with reason
// ApplyConflict and the managers named in the Ready condition. Fields that
// were changed by updates rather than applies (kubectl edit, a controller
// that updates) are drift, and Apply takes them back without an error.
type ConflictError struct {
	Child    OutputRef
	Managers []string // the conflicting field managers
	Fields   []string // the contested fields, such as .data.key
	Err      error    // the API server's answer

	drift bool // every conflicting manager wrote with an update, not an apply
	gvk   schema.GroupVersionKind
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("applying %s: fields %s are owned by field manager %s; pass fsm.ForceOwnership() to take them over",
		e.Child, strings.Join(e.Fields, ", "), quoteAll(e.Managers))
}

func (e *ConflictError) Unwrap() error { return e.Err }

// UndeclaredOutputError is what [Request.Apply] and [Request.Delete]
// return for a child whose type the machine does not declare with Owns.
// Nothing is written. The handler's state fails with reason
// UndeclaredOutput.
type UndeclaredOutputError struct {
	Machine string
	Kind    schema.GroupKind
}

func (e *UndeclaredOutputError) Error() string {
	return fmt.Sprintf("machine %s does not own %s: declare the type with Owns to apply or delete such children", e.Machine, e.Kind)
}

// OutputLimitError is what [Request.Apply] returns for a child that
// Status.Outputs cannot record within the bounds of its schema, rather
// than write a status that the API server would refuse: the object has
// 256 children already, or the child's group, kind, namespace, name or
// UID is longer than its field holds. Nothing is written, except for a
// UID, which is known once the child is applied. The handler's state
// fails with reason OutputLimit.
type OutputLimitError struct {
	Child OutputRef
	// Field is the field that is full: "outputs" for the number of
	// children, or the field of the child that is too long, such as
	// "name".
	Field string
	// Limit is the field's bound: a number of children, or of bytes.
	Limit int
}

func (e *OutputLimitError) Error() string {
	if e.Field == "outputs" {
		return fmt.Sprintf("applying %s: the object has %d children already, as many as status.outputs records; delete one before applying another", e.Child, e.Limit)
	}
	return fmt.Sprintf("applying %s: its %s is longer than the %d bytes that status.outputs records", e.Child, e.Field, e.Limit)
}

// managerInConflict reads a conflict cause from the API server. A manager
// that applied is named alone ("conflict with \"team-b\""); one that wrote
// with an update carries the version it used ("conflict with
// \"kubectl-edit\" using v1 at 2026-01-02T03:04:05Z").
var managerInConflict = regexp.MustCompile(`conflict with "([^"]*)"(?: with subresource "[^"]*")?( using .*)?$`)

func applyFailed(ref OutputRef, gvk schema.GroupVersionKind, err error) error {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return fmt.Errorf("applying %s: %w", ref, err)
	}
	ce := &ConflictError{Child: ref, Err: err, drift: true, gvk: gvk}
	for _, c := range status.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		m := managerInConflict.FindStringSubmatch(c.Message)
		if m == nil {
			continue
		}
		if !slices.Contains(ce.Managers, m[1]) {
			ce.Managers = append(ce.Managers, m[1])
		}
		ce.Fields = append(ce.Fields, c.Field)
		ce.drift = ce.drift && m[2] != ""
	}
	if len(ce.Managers) == 0 {
		return fmt.Errorf("applying %s: %w", ref, err)
	}
	return ce
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
