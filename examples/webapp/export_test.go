package webapp

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kfsm/kfsm/examples/webapp/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
)

// VersionOne is the web app pipeline as version 1 of its graph shipped,
// with Published named Registered: the operator that the upgrade's test
// replaces, kept in the tests as a team keeps its last release's.
func (o *Operator) VersionOne() *fsm.Machine[*v1alpha1.WebApp] {
	const registered fsm.State = "Registered"
	expose := func(ctx context.Context, r *request) fsm.Result {
		if err := applyService(ctx, r); err != nil {
			return fsm.Fail(err)
		}
		return fsm.Next(registered)
	}
	return fsm.New[*v1alpha1.WebApp]("webapp", fsm.Pipeline).
		Initial(Validated).
		State(Validated, o.validate, fsm.To(Configured)).
		State(Configured, o.configure, fsm.To(Deployed)).
		State(Deployed, o.deploy, fsm.To(Exposed)).
		State(Exposed, expose, fsm.To(registered)).
		State(registered, o.register, fsm.To(Available)).
		State(Available, o.available, fsm.To(Serving)).
		State(Serving, nil, fsm.Final()).
		OnDelete(Deregistered).
		State(Deregistered, o.deregister, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{})
}
