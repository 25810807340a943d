package fsm_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestWebhookConfigurationsNameTheMachinesPathsAndFailClosed(t *testing.T) {
	res := schema.GroupVersionResource{Group: "testing.kfsm.dev", Version: "v1alpha1", Resource: "gadgets"}
	svc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ops", Name: "gadget-webhooks"}}

	m := appMachine("plain")
	validating, mutating := m.WebhookConfigurations(res, svc)
	if mutating != nil {
		t.Errorf("a machine without Default has a mutating configuration: %+v", mutating)
	}
	hook := validating.Webhooks[0]
	if got := ptr.Deref(hook.ClientConfig.Service.Path, ""); got != "/kfsm/validate/plain" || got != m.ValidatePath() {
		t.Errorf("the validating webhook is at %q, want %s", got, m.ValidatePath())
	}
	if svc.Service.Path != nil {
		t.Error("WebhookConfigurations changed the client configuration it was given")
	}
	if *hook.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failure policy %s, want Fail", *hook.FailurePolicy)
	}
	wantRule := admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"testing.kfsm.dev"}, APIVersions: []string{"v1alpha1"},
			Resources: []string{"gadgets", "gadgets/status"}, Scope: ptr.To(admissionregistrationv1.AllScopes)},
	}
	if diff := cmp.Diff([]admissionregistrationv1.RuleWithOperations{wantRule}, hook.Rules); diff != "" {
		t.Errorf("rules without ValidateDelete (-want +got):\n%s", diff)
	}

	guarded := appMachine("guarded").Admission(fsm.Admission[*v1alpha1.Gadget]{
		Default:        func(context.Context, *v1alpha1.Gadget) error { return nil },
		ValidateDelete: func(context.Context, *v1alpha1.Gadget) error { return nil },
	})
	url := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/")}
	validating, mutating = guarded.WebhookConfigurations(res, url)
	if got := validating.Webhooks[0].Rules[0].Operations; !cmp.Equal(got, []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}) {
		t.Errorf("with ValidateDelete the validating webhook sees %v, want deletes too", got)
	}
	if mutating == nil {
		t.Fatal("a machine with Default has no mutating configuration")
	}
	m0 := mutating.Webhooks[0]
	if got := ptr.Deref(m0.ClientConfig.URL, ""); got != "https://127.0.0.1:9443/kfsm/default/guarded" {
		t.Errorf("the defaulting webhook is at %q", got)
	}
	if got := m0.Rules[0]; !cmp.Equal(got.Operations, wantRule.Operations) || !cmp.Equal(got.Resources, []string{"gadgets"}) {
		t.Errorf("the defaulting webhook sees %v of %v, want creates and updates of gadgets", got.Operations, got.Resources)
	}
}
