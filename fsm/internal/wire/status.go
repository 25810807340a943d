package wire

// The status of a Kubernetes object of any Go type, found by reflection:
// the field named Status, which kfsm compares, copies and writes as a
// merge patch made from the encodings of the two statuses (mergepatch.go).

import (
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
)

// Field is the Status field of obj, a pointer to a struct; invalid for
// any other object.
func Field(obj runtime.Object) reflect.Value {
	v := reflect.ValueOf(obj)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		return v.Elem().FieldByName("Status")
	}
	return reflect.Value{}
}

// Of returns the Status field of obj, or the whole object for a type
// without one. Comparing only the status keeps a handler that touches the
// spec by mistake from costing a write on every reconcile.
func Of(obj runtime.Object) any {
	if f := Field(obj); f.IsValid() {
		return f.Interface()
	}
	return obj
}

// Ptr is Of without a copy: a pointer to the Status field.
func Ptr(obj runtime.Object) any {
	if f := Field(obj); f.IsValid() && f.CanAddr() {
		return f.Addr().Interface()
	}
	return obj
}

// Same reports whether a and b hold the same status, as the API server
// would store it. Identical values, what a converged object's walk
// leaves, are recognised quickly; otherwise semantic equality decides,
// for which a time in another location at the same instant is no change.
func Same(a, b runtime.Object) bool {
	x, y := Ptr(a), Ptr(b)
	return reflect.DeepEqual(x, y) || equality.Semantic.DeepEqual(x, y)
}

// Copier returns the DeepCopy method of the Status field's type of struct
// type t, if it has one that returns a copy of that type. A status type
// that embeds another and has no DeepCopy of its own has the embedded
// one's, promoted, which copies only the embedded part: that one is no
// copier, and the status is then copied with the whole object.
func Copier(t reflect.Type) reflect.Value {
	f, ok := t.FieldByName("Status")
	if !ok {
		return reflect.Value{}
	}
	ptr := reflect.PointerTo(f.Type)
	copier, ok := ptr.MethodByName("DeepCopy")
	if !ok || copier.Type.NumIn() != 1 || copier.Type.NumOut() != 1 || copier.Type.Out(0) != ptr {
		return reflect.Value{}
	}
	return copier.Func
}
