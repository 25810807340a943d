package fsm

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
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
	v := &validator[T]{m: m, operators: &operators{machine: m.name, names: m.admission.Operators, client: mgr.GetClient(), log: mgr.GetLogger().WithName("kfsm")}}
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
	operators *operators
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
	changed := changedFields(old.FSMStatus(), obj.FSMStatus())
	if len(changed) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("status.%s of a %s is written by the operator of machine %s only (%s), not by %s",
		strings.Join(changed, ", status."), reflect.TypeFor[T]().Elem().Name(), v.m.name, strings.Join(operators, ", "), user)
}

// relearnAfter is how long a failure to learn the operator's identity
// stands before an admission request tries again.
const relearnAfter = 5 * time.Second

// operators are the users that may write a machine's Status, for the
// status guard of its validating webhook: those that Admission.Operators
// names, or else the manager's own identity, as its SelfSubjectReview
// tells it.
type operators struct {
	machine string
	client  client.Client
	log     logr.Logger

	mu     sync.Mutex
	names  []string  // given, or learnt from the API server
	failed time.Time // when learning them last failed
	err    error     // why
}

// Names returns the users that may write Status; or, while they are
// unknown, why.
func (o *operators) Names(ctx context.Context) (names []string, unknown string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.names) > 0 {
		return o.names, ""
	}
	if o.err != nil && time.Since(o.failed) < relearnAfter {
		return nil, o.err.Error()
	}
	review := &authenticationv1.SelfSubjectReview{}
	err := o.client.Create(ctx, review)
	switch {
	case err != nil:
		err = fmt.Errorf("machine %s: the operator's own user name is unknown: the SelfSubjectReview failed: %w", o.machine, err)
	case review.Status.UserInfo.Username == "":
		err = fmt.Errorf("machine %s: the operator's own user name is unknown: the API server's SelfSubjectReview named nobody", o.machine)
	}
	if err != nil {
		o.failed, o.err = time.Now(), err
		o.log.Error(err, "the status guard lets every status write through until it knows the operator; set Admission.Operators to name it", "machine", o.machine)
		return nil, err.Error()
	}
	o.names, o.err = []string{review.Status.UserInfo.Username}, nil
	o.log.Info("the status guard knows the operator", "machine", o.machine, "user", o.names[0])
	return o.names, ""
}

// Start learns the operator's identity, trying again after each failure,
// until it knows it or ctx ends. Every replica serves the webhooks, the
// leader or not, so every replica learns it.
func (o *operators) Start(ctx context.Context) error {
	for {
		if _, unknown := o.Names(ctx); unknown == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(relearnAfter):
		}
	}
}

// NeedLeaderElection says that every replica learns it.
func (*operators) NeedLeaderElection() bool { return false }

// changedFields names, sorted, the JSON fields in which two values differ.
func changedFields(old, cur any) []string {
	var a, b map[string]json.RawMessage
	oldJSON, _ := json.Marshal(old)
	curJSON, _ := json.Marshal(cur)
	_ = json.Unmarshal(oldJSON, &a)
	_ = json.Unmarshal(curJSON, &b)
	var changed []string
	for k, v := range a {
		if string(b[k]) != string(v) {
			changed = append(changed, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			changed = append(changed, k)
		}
	}
	slices.Sort(changed)
	return changed
}
