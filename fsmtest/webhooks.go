package fsmtest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/fsm"
)

// WithWebhooks serves the machine's admission webhooks from the
// operator's manager, as a deployed operator serves them, and has the API
// server call them over TLS for the objects of the test's namespace. The
// certificate is made for the test; the configurations are the machine's
// WebhookConfigurations, in place before Run returns and removed when the
// test ends. While the operator is stopped its webhooks are down, and the
// API server's failure policy decides.
func WithWebhooks() RunOption {
	return func(o *runOptions) { o.webhooks = true }
}

// probeLabel marks the ConfigMaps that tell when the API server calls the
// test's webhooks.
const probeLabel = "fsmtest.kfsm.dev/webhook-probe"

// hooks is where an operator serves its webhooks: one address and
// certificate for all its processes.
type hooks struct {
	serving   *cluster.WebhookServing
	installed bool
	probed    atomic.Int64
}

func newHooks(e *Env) (*hooks, error) {
	serving, err := cluster.NewWebhookServing()
	if err != nil {
		return nil, fmt.Errorf("fsmtest: %w", err)
	}
	e.T.Cleanup(func() { _ = serving.Close() })
	return &hooks{serving: serving}, nil
}

// server is a webhook server for one operator process.
func (h *hooks) server() webhook.Server {
	srv := webhook.NewServer(h.serving.ServerOptions())
	probe := &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		h.probed.Add(1)
		return admission.Allowed("")
	})}
	srv.Register("/fsmtest/probe", probe)
	return srv
}

// install has the API server call m's webhooks for e's namespace, once
// per test, and waits until it does.
func installHooks[T fsm.Object](h *hooks, e *Env, m *fsm.Machine[T]) error {
	if h.installed {
		return nil
	}
	h.installed = true
	gvk, err := apiutil.GVKForObject(newObject[T](), e.Scheme)
	if err != nil {
		return err
	}
	mapping, err := e.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("fsmtest: the resource of %s: %w", gvk.Kind, err)
	}
	at := h.serving.ClientConfig()
	validating, mutating := m.WebhookConfigurations(mapping.Resource, at)
	inNamespace := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: e.Namespace}}
	probeURL := *at.URL + "/fsmtest/probe"
	// A probe in each configuration, on ConfigMaps that only fsmtest
	// labels: once the API server calls the probes, it calls the
	// machine's webhooks too, which came in the same objects.
	probe := admissionregistrationv1.ValidatingWebhook{
		Name:         "probe.fsmtest.kfsm.dev",
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &probeURL, CABundle: at.CABundle},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		}},
		ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{probeLabel: e.Namespace}},
		SideEffects:             validating.Webhooks[0].SideEffects,
		AdmissionReviewVersions: []string{"v1"},
	}
	var objs []client.Object
	validating.Name += "-" + e.Namespace
	for i := range validating.Webhooks {
		validating.Webhooks[i].NamespaceSelector = inNamespace
	}
	validating.Webhooks = append(validating.Webhooks, probe)
	objs = append(objs, validating)
	want := int64(1)
	if mutating != nil {
		mutating.Name += "-" + e.Namespace
		for i := range mutating.Webhooks {
			mutating.Webhooks[i].NamespaceSelector = inNamespace
		}
		mutating.Webhooks = append(mutating.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name: probe.Name, ClientConfig: probe.ClientConfig, Rules: probe.Rules, ObjectSelector: probe.ObjectSelector,
			SideEffects: probe.SideEffects, AdmissionReviewVersions: probe.AdmissionReviewVersions,
		})
		objs = append(objs, mutating)
		want = 2
	}
	ctx := context.Background()
	for _, obj := range objs {
		if err := e.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("fsmtest: installing the webhooks: %w", err)
		}
		e.T.Cleanup(func() { _ = client.IgnoreNotFound(e.Client.Delete(ctx, obj)) })
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: e.Namespace, GenerateName: "webhook-probe-", Labels: map[string]string{probeLabel: e.Namespace},
	}}
	for deadline := time.Now().Add(e.Timeout); h.probed.Load() < want; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("fsmtest: the API server did not call the webhooks within %v", e.Timeout)
		}
		h.probed.Store(0)
		_ = e.Client.Create(ctx, cm.DeepCopy(), client.DryRunAll)
	}
	return nil
}
