package fsmtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// guarded is a gadget machine whose webhooks default the mode, refuse a
// lower target and keep a gadget in mode "keep" from deletion.
func guarded() *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("guarded", fsm.Lifecycle).
		Initial(Working).
		State(Working, func(context.Context, *request) fsm.Result { return fsm.Next(Ready) }, fsm.To(Ready)).
		State(Ready, nil, fsm.Final()).
		Admission(fsm.Admission[*v1alpha1.Gadget]{
			Default: func(_ context.Context, g *v1alpha1.Gadget) error {
				if g.Spec.Mode == "" {
					g.Spec.Mode = "standard"
				}
				return nil
			},
			ValidateUpdate: func(_ context.Context, old, g *v1alpha1.Gadget) error {
				if g.Spec.Target < old.Spec.Target {
					return errors.New("the target may only grow")
				}
				return nil
			},
			ValidateDelete: func(_ context.Context, g *v1alpha1.Gadget) error {
				if g.Spec.Mode == "keep" {
					return errors.New("a gadget in mode keep is kept")
				}
				return nil
			},
		})
}

func TestWebhooksDefaultValidateAndGuardTheStatus(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, guarded(), fsmtest.WithWebhooks())
	ctx := context.Background()
	refused := func(what string, err error, says string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: got %v, want it refused saying %q", what, err, says)
		}
	}

	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}, Spec: v1alpha1.GadgetSpec{Target: 2}}
	e.Create(g)
	if g.Spec.Mode != "standard" {
		t.Errorf("spec.mode = %q after create, want the default standard", g.Spec.Mode)
	}
	// The operator's own status writes pass.
	e.AwaitState(g, Ready)
	e.AwaitReady(g)

	lower := g.DeepCopy()
	lower.Spec.Target = 1
	refused("lowering the target", e.Client.Update(ctx, lower), "the target may only grow")

	// The type's own status fields are the author's; kfsm's are the
	// operator's. Here the operator is the cluster's admin, as the test
	// is: someone else edits the status.
	cfg := e.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:masters"}}
	alice, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	note := g.DeepCopy()
	note.Status.Note = "by hand"
	if err := alice.Status().Update(ctx, note); err != nil {
		t.Errorf("writing status.note by hand: %v", err)
	}
	e.Get(g)
	state := g.DeepCopy()
	state.Status.State, state.Status.History = Working, nil
	refused("writing status.state and status.history by hand", alice.Status().Update(ctx, state),
		"status.history, status.state of a Gadget is written by the operator of machine guarded only")

	e.Get(g)
	keep := g.DeepCopy()
	keep.Spec.Mode = "keep"
	if err := e.Client.Update(ctx, keep); err != nil {
		t.Fatal(err)
	}
	refused("deleting a kept gadget", e.Client.Delete(ctx, keep), "a gadget in mode keep is kept")
	e.Update(g, func() { g.Spec.Mode = "standard" })
	if err := e.Client.Delete(ctx, g); client.IgnoreNotFound(err) != nil {
		t.Errorf("deleting a gadget not kept: %v", err)
	}
	e.AwaitGone(g)
}
