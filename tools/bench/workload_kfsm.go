package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// The workload's states as a kfsm pipeline. The final state cannot be
// named Ready: in a pipeline each state is a condition of its name, and
// Ready is kfsm's own.
const (
	Configured fsm.State = "Configured"
	Exposed    fsm.State = "Exposed"
	Done       fsm.State = "Done"
)

type gadgetRequest = fsm.Request[*v1alpha1.Gadget]

// setupKfsm registers the workload as a kfsm pipeline.
func setupKfsm(mgr ctrl.Manager, workers int) error {
	return gadgetMachine(workers).SetupWithManager(mgr)
}

// gadgetMachine is the workload as a kfsm pipeline: the ConfigMap, then
// the Service, then done.
func gadgetMachine(workers int) *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("gadget", fsm.Pipeline).
		Initial(Configured).
		State(Configured, configure, fsm.To(Exposed)).
		State(Exposed, expose, fsm.To(Done)).
		State(Done, nil, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Tune(fsm.Tuning{Workers: workers})
}

func configure(ctx context.Context, r *gadgetRequest) fsm.Result {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
		Data:       map[string]string{"target": fmt.Sprint(r.Object.Spec.Target)},
	}
	if err := r.Apply(ctx, cm); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(Exposed)
}

func expose(ctx context.Context, r *gadgetRequest) fsm.Result {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": r.Object.Name},
			Ports:     []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if err := r.Apply(ctx, svc); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(Done)
}
