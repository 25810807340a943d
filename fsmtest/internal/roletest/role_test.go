// Package roletest tests fsmtest's Options.Roles: the operator acts as a
// ServiceAccount with the given role and nothing more.
package roletest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	// A new child's first request is its create.
	for _, want := range []string{fsmtest.OperatorUser, `cannot create resource "secrets"`} {
		if !strings.Contains(message, want) {
			t.Errorf("the refusal %q does not say %q", message, want)
		}
	}
	if e.State(refused) != "Applying" {
		t.Errorf("the refused gadget is in state %s, want Applying", e.State(refused))
	}
}

// An operator that may not list a kind it owns never syncs its cache:
// Run fails at once, saying what the API server refused, and the
// operator still stops.
func TestAnOperatorThatMayNotListFailsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an API server, which -short does not start")
	}
	var failure string
	stopped := make(chan struct{})
	t.Run("run", func(t *testing.T) {
		ft := &fatalRecorder{T: t}
		e := fsmtest.New(ft)
		e.Timeout = 5 * time.Second
		m := fsm.New[*v1alpha1.Gadget]("unlisted", fsm.Lifecycle).
			Initial("Applying").
			State("Applying", func(context.Context, *fsm.Request[*v1alpha1.Gadget]) fsm.Result { return fsm.Next("Applied") }, fsm.To("Applied")).
			State("Applied", nil, fsm.Final()).
			Owns(&corev1.ServiceAccount{})
		func() {
			defer func() { failure = ft.failure; _ = recover() }()
			fsmtest.Run(e, m)
		}()
		close(stopped)
	})
	<-stopped
	for _, want := range []string{"the operator's cache did not sync within 5s", `cannot list resource "serviceaccounts"`, fsmtest.OperatorUser} {
		if !strings.Contains(failure, want) {
			t.Errorf("Run failed with %q, which does not say %q", failure, want)
		}
	}
}

// fatalRecorder keeps the message of a Fatal instead of failing the test.
type fatalRecorder struct {
	*testing.T
	failure string
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.failure = fmt.Sprint(args...)
	panic(f)
}
