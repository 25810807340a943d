package fsmtest

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// watchKind notes the kinds of a machine's objects and children, which
// snapshots and Children read.
func (e *Env) watchKind(parent client.Object, owned []client.Object) {
	e.kindsMu.Lock()
	defer e.kindsMu.Unlock()
	add := func(list *[]schema.GroupVersionKind, obj client.Object) {
		if gvk := e.kindOf(obj); !slices.Contains(*list, gvk) {
			*list = append(*list, gvk)
		}
	}
	add(&e.parents, parent)
	for _, o := range owned {
		add(&e.owned, o)
	}
}

func (e *Env) childKinds() []schema.GroupVersionKind {
	e.kindsMu.Lock()
	defer e.kindsMu.Unlock()
	return slices.Clone(e.owned)
}

func (e *Env) parentKinds() []schema.GroupVersionKind {
	e.kindsMu.Lock()
	defer e.kindsMu.Unlock()
	return slices.Clone(e.parents)
}

// listOf lists the metadata of the objects of T's kind in e's namespace.
func listOf[T client.Object](e *Env) ([]client.Object, error) {
	list := &metav1.PartialObjectMetadataList{}
	gvk := e.kindOf(newObject[T]())
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := e.Client.List(context.Background(), list, client.InNamespace(e.Namespace)); err != nil {
		return nil, fmt.Errorf("fsmtest: listing %s: %w", gvk.Kind, err)
	}
	out := make([]client.Object, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// recorder writes the step driver's events to the API server at once, as
// the test: what Events reads under either driver.
type recorder struct{ e *Env }

var _ events.EventRecorder = (*recorder)(nil)

func (r *recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	obj, ok := regarding.(client.Object)
	if !ok {
		return
	}
	gvk := r.e.kindOf(regarding)
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", obj.GetName(), time.Now().UnixNano()), Namespace: obj.GetNamespace()},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "fsmtest",
		ReportingInstance:   "fsmtest",
		Action:              action,
		Reason:              reason,
		Type:                eventtype,
		Note:                fmt.Sprintf(note, args...),
		Regarding: corev1.ObjectReference{
			APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(),
		},
	}
	if err := r.e.Client.Create(context.Background(), ev); err != nil {
		r.e.T.Errorf("fsmtest: recording an event: %v", err)
	}
}
