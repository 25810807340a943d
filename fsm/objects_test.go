package fsm_test

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// When someone removes kfsm's finalizer by hand while the deletion path
// is under way, the children that garbage collection cannot reach are
// deleted all the same.
func TestUnderManagerChildrenOfAVanishedParentAreDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("vanished", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Namespace + "-vanished"}}
			return failOr(r.Apply(ctx, role), fsm.Done())
		}, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", func(context.Context, *request) fsm.Result {
			return fsm.Wait(time.Hour, "WaitingForTheBackup")
		}, fsm.To("Gone")).
		State("Gone", done, fsm.Final()).
		Owns(&rbacv1.ClusterRole{})
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the deletion path", func() bool { return e.get("g").Status.State == "Cleanup" })
	g := e.get("g")
	g.Finalizers = nil
	if err := e.direct.Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	role := client.ObjectKey{Name: e.namespace + "-vanished"}
	e.fe.Await("the cluster-scoped child to be deleted", func() bool {
		return apierrors.IsNotFound(e.direct.Get(t.Context(), role, &rbacv1.ClusterRole{}))
	})
}
