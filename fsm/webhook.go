package fsm

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kfsm/kfsm/fsm/internal/identity"
)

// Admission is what a machine's admission webhooks do beyond kfsm's own
// checks. Every function is optional; give them to [Machine.Admission].
type Admission[T Object] struct {
	// Default sets the defaults of an object being created or updated,
	// before it is validated and stored.
	Default func(ctx context.Context, obj T) error
	// ValidateCreate, ValidateUpdate and ValidateDelete refuse a write to
	// the object's spec or metadata with an error, whose text the user
	// sees. They are not called for writes of the status.
	ValidateCreate func(ctx context.Context, obj T) error
	ValidateUpdate func(ctx context.Context, old, obj T) error
	ValidateDelete func(ctx context.Context, obj T) error
	// Operators are the user names that may change the fields of Status.
	// Empty means the identity that the manager's client authenticates
	// as, which the webhook asks the API server for when the manager
	// starts (a SelfSubjectReview): the operator's own ServiceAccount, in
	// a cluster. Until it knows it, status writes are not checked.
	Operators []string
}

// Admission gives the machine's admission webhooks the author's defaults
// and checks; SetupWebhookWithManager serves them. See "Admission
// webhooks" in the package doc for what kfsm checks itself.
func (m *Machine[T]) Admission(a Admission[T]) *Machine[T] {
	m.admission = a
	return m
}

// ValidatePath is the path of the machine's validating webhook on the
// manager's webhook server.
func (m *Machine[T]) ValidatePath() string { return "/kfsm/validate/" + m.name }

// DefaultPath is the path of the machine's defaulting webhook, served
// when Admission gives a Default function.
func (m *Machine[T]) DefaultPath() string { return "/kfsm/default/" + m.name }

// SetupWebhookWithManager builds the machine and serves its admission
// webhooks on the manager's webhook server: a validating webhook at
// ValidatePath, with kfsm's checks and the author's, and a defaulting one
// at DefaultPath when Admission gives a Default function. The API server
// calls them once a configuration names them; WebhookConfigurations makes
// those.
func (m *Machine[T]) SetupWebhookWithManager(mgr manager.Manager) error {
	if err := m.Build(); err != nil {
		return err
	}
	v := &validator[T]{m: m, operators: identity.New(m.name, m.admission.Operators, mgr.GetClient(), mgr.GetLogger().WithName("kfsm"))}
	if len(m.admission.Operators) == 0 {
		if err := mgr.Add(v.operators); err != nil {
			return err
		}
	}
	srv := mgr.GetWebhookServer()
	srv.Register(m.ValidatePath(), admission.WithValidator[T](mgr.GetScheme(), v))
	if m.admission.Default != nil {
		srv.Register(m.DefaultPath(), admission.WithDefaulter[T](mgr.GetScheme(), defaulter[T](m.admission.Default)))
	}
	return nil
}

// WebhookConfigurations returns the configurations that make the API
// server call the machine's webhooks for resource, reached through
// client (a Service, or a URL; kfsm sets the path). The mutating one is
// nil without a Default function. Both fail closed (failurePolicy Fail):
// while no replica of the operator serves them, the API server refuses
// creates and updates of the resource and of its status, rather than let
// them through unchecked. Deletes are validated only when Admission
// gives ValidateDelete, so that a namespace can always be deleted.
func (m *Machine[T]) WebhookConfigurations(resource schema.GroupVersionResource, client admissionregistrationv1.WebhookClientConfig) (*admissionregistrationv1.ValidatingWebhookConfiguration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	rule := func(ops []admissionregistrationv1.OperationType, resources ...string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{resource.Group}, APIVersions: []string{resource.Version},
				Resources: resources, Scope: ptr.To(admissionregistrationv1.AllScopes),
			},
		}}
	}
	at := func(path string) admissionregistrationv1.WebhookClientConfig {
		c := *client.DeepCopy()
		if c.Service != nil {
			c.Service.Path = ptr.To(path)
		}
		if c.URL != nil {
			c.URL = ptr.To(strings.TrimSuffix(*c.URL, "/") + path)
		}
		return c
	}
	name := m.name + "." + resource.GroupResource().String()
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	if m.admission.ValidateDelete != nil {
		ops = append(ops, admissionregistrationv1.Delete)
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "kfsm-validate-" + name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate." + name,
			ClientConfig:            at(m.ValidatePath()),
			Rules:                   rule(ops, resource.Resource, resource.Resource+"/status"),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if m.admission.Default == nil {
		return validating, nil
	}
	return validating, &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "kfsm-default-" + name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "default." + name,
			ClientConfig:            at(m.DefaultPath()),
			Rules:                   rule(ops[:2], resource.Resource),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

type defaulter[T Object] func(ctx context.Context, obj T) error

func (d defaulter[T]) Default(ctx context.Context, obj T) error { return d(ctx, obj) }

// validator is the machine's validating webhook.
type validator[T Object] struct {
	m         *Machine[T]
	operators *identity.Operators
}

func (v *validator[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	if err := v.checkGoal(obj); err != nil {
		return nil, err
	}
	if f := v.m.admission.ValidateCreate; f != nil {
		return nil, f(ctx, obj)
	}
	return nil, nil
}

func (v *validator[T]) ValidateUpdate(ctx context.Context, old, obj T) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, err
	}
	if req.SubResource == "status" {
		return v.checkStatusWriter(ctx, req.UserInfo.Username, old, obj)
	}
	// Only a change of goal is checked: the operator's own writes (a
	// finalizer, on the way out) pass while the object is stalled.
	if v.m.goal != nil && v.m.goal(old) != v.m.goal(obj) {
		if err := v.checkGoal(obj); err != nil {
			return nil, err
		}
	}
	if f := v.m.admission.ValidateUpdate; f != nil {
		return nil, f(ctx, old, obj)
	}
	return nil, nil
}

func (v *validator[T]) ValidateDelete(ctx context.Context, obj T) (admission.Warnings, error) {
	if f := v.m.admission.ValidateDelete; f != nil {
		return nil, f(ctx, obj)
	}
	return nil, nil
}

// checkGoal refuses a goal that no path reaches from where the object
// is, in the words of the GoalUnreachable condition.
func (v *validator[T]) checkGoal(obj T) error {
	if v.m.goal == nil || !obj.GetDeletionTimestamp().IsZero() {
		return nil
	}
	goal := v.m.goal(obj)
	if goal == "" {
		return nil
	}
	return v.m.CheckGoal(obj.FSMStatus().State, goal)
}

// checkStatusWriter refuses a change to the fields of Status by anyone
// but the operator. While the operator's identity is unknown, it lets
// the change through with a warning: refusing it would refuse the
// operator's own writes.
func (v *validator[T]) checkStatusWriter(ctx context.Context, user string, old, obj T) (admission.Warnings, error) {
	// Every status write of the operator comes here: the cheap test first.
	operators, unknown := v.operators.Names(ctx)
	if unknown != "" {
		return admission.Warnings{unknown + "; until it is known, status writes are not checked"}, nil
	}
	if slices.Contains(operators, user) {
		return nil, nil
	}
	changed := identity.ChangedFields(old.FSMStatus(), obj.FSMStatus())
	if len(changed) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("status.%s of a %s is written by the operator of machine %s only (%s), not by %s",
		strings.Join(changed, ", status."), reflect.TypeFor[T]().Elem().Name(), v.m.name, strings.Join(operators, ", "), user)
}
