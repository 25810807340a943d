// Package webapp is an achilles-style pipeline written with kfsm: every
// reconcile walks a WebApp from validation through its ConfigMap,
// Deployment and Service to a registered DNS name and an Available
// Deployment. Children are applied with kfsm's outputs and pruned when no
// longer desired; the deletion path removes the DNS record, outside
// Kubernetes, before the finalizer goes.
package webapp

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/examples/webapp/dns"
	"github.com/kfsm/kfsm/examples/webapp/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
)

// The states of a web app. In a pipeline each is also a condition of the
// same name.
const (
	Validated    fsm.State = "Validated"
	Configured   fsm.State = "Configured"
	Deployed     fsm.State = "Deployed"
	Exposed      fsm.State = "Exposed"
	Published    fsm.State = "Published"
	Available    fsm.State = "Available"
	Serving      fsm.State = "Serving"
	Deregistered fsm.State = "Deregistered"
)

// Operator holds what the handlers need beyond the request: the DNS
// registry.
type Operator struct {
	DNS *dns.Client
}

// Machine returns the web app pipeline.
//
// Version 2 of its graph names Published the state that version 1 named
// Registered: the app's name published in DNS. An app that an operator of
// version 1 left in Registered (waiting for the DNS registry, say) moves
// to Published, its condition with it, when version 2 first reads it; the
// graphs of both versions are kept in webapp.graph.lock.json.
func (o *Operator) Machine() *fsm.Machine[*v1alpha1.WebApp] {
	return fsm.New[*v1alpha1.WebApp]("webapp", fsm.Pipeline).
		Version(2, fsm.Rename("Registered", Published)).
		Initial(Validated).
		State(Validated, o.validate, fsm.To(Configured)).
		State(Configured, o.configure, fsm.To(Deployed)).
		State(Deployed, o.deploy, fsm.To(Exposed)).
		State(Exposed, o.expose, fsm.To(Published)).
		State(Published, o.register, fsm.To(Available)).
		State(Available, o.available, fsm.To(Serving)).
		State(Serving, nil, fsm.Final()).
		OnDelete(Deregistered).
		State(Deregistered, o.deregister, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{})
}

type request = fsm.Request[*v1alpha1.WebApp]

// validate checks what the CRD cannot: configuration keys must be valid
// environment variable names. A bad spec stops the app until it is fixed.
func (o *Operator) validate(_ context.Context, r *request) fsm.Result {
	for _, key := range slices.Sorted(maps.Keys(r.Object.Spec.Config)) {
		if errs := validation.IsEnvVarName(key); len(errs) > 0 {
			return fsm.Stop("InvalidConfig", fmt.Sprintf("spec.config key %q is not an environment variable name: %s", key, errs[0]))
		}
	}
	return fsm.Next(Configured)
}

func (o *Operator) configure(ctx context.Context, r *request) fsm.Result {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configName(r.Object)}, Data: r.Object.Spec.Config}
	if err := r.Apply(ctx, cm); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(Deployed)
}

func (o *Operator) deploy(ctx context.Context, r *request) fsm.Result {
	app := r.Object
	labels := map[string]string{"app.kubernetes.io/name": app.Name}
	// The API server defaults an absent count to 1; a client that did not
	// read the object back may still hold none.
	replicas := ptr.Deref(app.Spec.Replicas, 1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app.Name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:    "web",
					Image:   app.Spec.Image,
					Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: configName(app)}}}},
				}}},
			},
		},
	}
	if err := r.Apply(ctx, d); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(Exposed)
}

// expose applies the Service only when asked; an un-exposed app's Service
// is pruned once the pass reaches Serving.
func (o *Operator) expose(ctx context.Context, r *request) fsm.Result {
	if err := applyService(ctx, r); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(Published)
}

// applyService applies the app's Service, if it is exposed.
func applyService(ctx context.Context, r *request) error {
	if !ptr.Deref(r.Object.Spec.Expose, false) {
		return nil
	}
	return r.Apply(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app.kubernetes.io/name": r.Object.Name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	})
}

// register points spec.dnsName at the app's Service and removes the
// record of the name registered before, if the spec names another now
// (or none). The new name goes in first: both names point at the same
// Service, so the app answers under one of them at every moment, and a
// registry that refuses the new name leaves the old one serving.
//
// Only the name in status.registeredDNSName is ever removed, never one
// the operator did not register. The status records the new name in the
// pass's status write; a crash before it leaves the old name recorded,
// and the next pass registers the new one and removes the old one again,
// both idempotent.
func (o *Operator) register(ctx context.Context, r *request) fsm.Result {
	app := r.Object
	if name := app.Spec.DNSName; name != "" {
		if err := o.DNS.Register(ctx, name, target(app)); err != nil {
			return fsm.Fail(err)
		}
	}
	if old := app.Status.RegisteredDNSName; old != "" && old != app.Spec.DNSName {
		if err := o.DNS.Deregister(ctx, old); err != nil {
			return fsm.Fail(err)
		}
	}
	app.Status.RegisteredDNSName = app.Spec.DNSName
	return fsm.Next(Available)
}

// available waits for the Deployment to report Available for its latest
// spec; its status changes wake the app, as kfsm watches owned types.
func (o *Operator) available(ctx context.Context, r *request) fsm.Result {
	var d appsv1.Deployment
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Object.Namespace, Name: r.Object.Name}, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return fsm.Wait(0, "WaitingForDeployment") // just applied; the cache has not seen it yet
		}
		return fsm.Fail(err)
	}
	r.Object.Status.AvailableReplicas = d.Status.AvailableReplicas
	if d.Status.ObservedGeneration < d.Generation || !deploymentAvailable(&d) || d.Status.UpdatedReplicas < ptr.Deref(r.Object.Spec.Replicas, 1) {
		return fsm.Wait(0, "WaitingForDeployment")
	}
	return fsm.Next(Serving)
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deregister removes the DNS record that the operator registered, which
// may not be spec.dnsName's if the spec changed since the last pass;
// while the registry is down it fails, kfsm retries with backoff, and
// the finalizer holds the app.
func (o *Operator) deregister(ctx context.Context, r *request) fsm.Result {
	if name := r.Object.Status.RegisteredDNSName; name != "" {
		if err := o.DNS.Deregister(ctx, name); err != nil {
			return fsm.Fail(err)
		}
		r.Object.Status.RegisteredDNSName = ""
	}
	return fsm.Done()
}

func configName(app *v1alpha1.WebApp) string { return app.Name + "-config" }

// target is what the DNS name points at: the app's Service.
func target(app *v1alpha1.WebApp) string {
	return fmt.Sprintf("%s.%s.svc.cluster.local", app.Name, app.Namespace)
}
