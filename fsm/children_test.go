package fsm_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// webMachine is a pipeline with two children: a ConfigMap always, and a
// Service while the gadget's mode is "expose" (or "force", which takes
// the Service's fields over from other managers).
func webMachine(name string) *fsm.Machine[*gadget] {
	return fsm.New[*gadget](name, fsm.Pipeline).
		Initial("Config").
		State("Config", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-config"},
				Data:       map[string]string{"target": strconv.Itoa(int(r.Object.Spec.Target))},
			}
			return failOr(r.Apply(ctx, cm), fsm.Next("Expose"))
		}, fsm.To("Expose")).
		State("Expose", func(ctx context.Context, r *request) fsm.Result {
			if r.Object.Spec.Mode != "expose" && r.Object.Spec.Mode != "force" {
				return fsm.Next("Serving")
			}
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
				Spec: corev1.ServiceSpec{
					Selector: map[string]string{"app": r.Object.Name},
					Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
				},
			}
			var opts []fsm.ApplyOption
			if r.Object.Spec.Mode == "force" {
				opts = append(opts, fsm.ForceOwnership())
			}
			return failOr(r.Apply(ctx, svc, opts...), fsm.Next("Serving"))
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{})
}

// ignoreServerFields compares output refs without what the server
// picks: their UIDs and versions, and digests that cover the parent's UID.
var ignoreServerFields = cmpopts.IgnoreFields(fsm.OutputRef{}, "UID", "AppliedDigest", "ResourceVersion")

func (e *env) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: e.namespace, Name: name}
}

// exists reports whether the named object of obj's type exists.
func (e *env) exists(obj client.Object, name string) bool {
	e.t.Helper()
	err := e.direct.Get(e.t.Context(), e.key(name), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return err == nil
}

// managedBy reports whether manager owns fields of obj by op.
func managedBy(obj client.Object, manager string, op metav1.ManagedFieldsOperationType) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == op && f.Subresource == "" {
			return true
		}
	}
	return false
}

func reconcileRequest(e *env, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: e.key(name)}
}

// intercepted makes the manager's client with funcs in front of it.
func intercepted(funcs interceptor.Funcs) func(*rest.Config, client.Options) (client.Client, error) {
	return func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, opts)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(c, funcs), nil
	}
}

func TestUndeclaredChildTypeIsAnErrorAndNotWritten(t *testing.T) {
	e := newEnv(t)
	var applyErr error
	m := fsm.New[*gadget]("undeclared", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			applyErr = r.Apply(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
			return fsm.Done() // even a handler that ignores the error fails
		}, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	if f := e.fail(r); f.State != "Start" || f.RetryAfter <= 0 {
		t.Errorf("failure %+v, want state Start retried later", f)
	}

	var undeclared *fsm.UndeclaredOutputError
	if !errors.As(applyErr, &undeclared) || undeclared.Kind.Kind != "Secret" {
		t.Errorf("Apply() = %v, want an UndeclaredOutputError for Secret", applyErr)
	}
	g := e.get("g")
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, fsm.ReasonUndeclaredOutput)
	if msg := condition(g, fsm.ConditionReady).Message; !strings.Contains(msg, "does not own Secret") {
		t.Errorf("Ready message %q does not name the undeclared type", msg)
	}
	if e.exists(&corev1.Secret{}, "s") {
		t.Error("the undeclared Secret was written")
	}
}
