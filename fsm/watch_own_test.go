package fsm_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// A machine that watches its own kind to wake other objects (the moose
// herd wakes a moose's friends) must see kfsm's own status writes there:
// they are no news for the object written, but they are for the others.
func TestOwnWritesReachWatchesOfTheMachinesKind(t *testing.T) {
	e := fsmtest.New(t)
	e.Timeout = 10 * time.Second
	m := fsm.New[*v1alpha1.Gadget]("wakes-others", fsm.Lifecycle).
		Initial("Waiting").
		State("Waiting", func(ctx context.Context, r *request) fsm.Result {
			if r.Object.Name == "leader" {
				if r.Object.Spec.Mode != "go" {
					return fsm.Wait(0, "Resting")
				}
				r.Object.Status.Note = "ready" // in kfsm's status write
				return fsm.Done()
			}
			var leader v1alpha1.Gadget
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Object.Namespace, Name: "leader"}, &leader); err != nil {
				return fsm.Fail(err)
			}
			if leader.Status.Note != "ready" {
				return fsm.Wait(0, "Following")
			}
			r.Object.Status.Note = "saw the leader ready"
			return fsm.Done()
		}, fsm.To("Waiting")).
		// A leader's change wakes the follower.
		Watches(&v1alpha1.Gadget{}, func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetName() != "leader" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: "follower"}}}
		})
	fsmtest.Run(e, m)
	leader := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "leader"}}
	follower := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "follower"}}
	e.Create(leader)
	e.Create(follower)
	e.AwaitCondition(follower, fsm.ConditionReconciling, metav1.ConditionTrue)

	e.Update(leader, func() { leader.Spec.Mode = "go" })
	e.Await("the follower to see the leader ready", func() bool {
		return e.Get(follower) && follower.Status.Note == "saw the leader ready"
	})
}
