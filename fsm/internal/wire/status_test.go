package wire

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

type status struct {
	State string
	Since metav1.Time
}

func (s *status) DeepCopy() *status { c := *s; return &c }

type object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec   string
	Status status
}

func (o *object) DeepCopyObject() runtime.Object { c := *o; return &c }

type bare struct{ metav1.TypeMeta }

func (b *bare) DeepCopyObject() runtime.Object { c := *b; return &c }

func TestSameComparesTheStatusAlone(t *testing.T) {
	at := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	a := &object{Spec: "a", Status: status{State: "Ready", Since: metav1.NewTime(at)}}
	b := &object{Spec: "b", Status: status{State: "Ready", Since: metav1.NewTime(at.In(time.FixedZone("east", 3600)))}}
	if !Same(a, b) {
		t.Error("statuses at the same instant in two locations differ, or the spec counted")
	}
	b.Status.State = "Waiting"
	if Same(a, b) {
		t.Error("different states are the same")
	}
	if Of(&bare{}) == nil || Field(&bare{}).IsValid() {
		t.Error("an object without a Status field has one, or Of gave nothing")
	}
}

func TestCopierIsTheStatusTypesOwnDeepCopy(t *testing.T) {
	c := Copier(reflect.TypeFor[object]())
	if !c.IsValid() {
		t.Fatal("no copier for a status type with a DeepCopy of its own")
	}
	orig := &status{State: "A"}
	got := c.Call([]reflect.Value{reflect.ValueOf(orig)})[0].Interface().(*status)
	if got == orig || got.State != "A" {
		t.Errorf("the copier returned %p %+v for %p", got, got, orig)
	}
	if Copier(reflect.TypeFor[bare]()).IsValid() {
		t.Error("a copier for a type without a Status field")
	}
}
