package fsm

import (
	"errors"

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
