// Package roletest tests fsmtest's Options.Roles: the operator acts as a
// ServiceAccount with the given role and nothing more.
package roletest

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:    []string{filepath.Join("..", "..", "..", "internal", "testapi", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		Roles:       []fs.FS{os.DirFS("testdata")},
	})
}

// machine applies a ConfigMap for a gadget named "config" and a Secret
// for any other.
func machine() *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("roletest", fsm.Lifecycle).
		Initial("Applying").
		State("Applying", func(ctx context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
			meta := metav1.ObjectMeta{Namespace: r.Object.Namespace, Name: r.Object.Name}
			var child client.Object = &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"k": "v"}}
			if r.Object.Name == "config" {
				child = &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"k": "v"}}
			}
			if err := r.Apply(ctx, child); err != nil {
				return fsm.Fail(err)
			}
			return fsm.Next("Applied")
		}, fsm.To("Applied")).
		State("Applied", nil, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{})
}

func TestTheOperatorHasItsRoleAndNothingMore(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, machine())
	allowed := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "config"}}
	refused := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "secret"}}
	e.Create(allowed)
	e.Create(refused)

	e.AwaitState(allowed, "Applied")
	var message string
	e.Await("the Secret's apply to fail", func() bool {
		if !e.Get(refused) {
			return false
		}
		c := meta.FindStatusCondition(refused.Status.Conditions, fsm.ConditionReady)
		message = ""
		if c != nil {
			message = c.Message
		}
		return strings.Contains(message, "forbidden")
	})
	for _, want := range []string{fsmtest.OperatorUser, `cannot patch resource "secrets"`} {
		if !strings.Contains(message, want) {
			t.Errorf("the refusal %q does not say %q", message, want)
		}
	}
	if e.State(refused) != "Applying" {
		t.Errorf("the refused gadget is in state %s, want Applying", e.State(refused))
	}
}
