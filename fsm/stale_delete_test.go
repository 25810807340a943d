package fsm_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// Once the deletion path removed the finalizer, a cache that lags still
// holds the object with its finalizer; no handler of the deletion path
// may run again on that old copy. fsmtest fails a test where a handler
// ran on a copy older than one the operator wrote.
func TestNoDeletionHandlerRunsOnACopyOlderThanTheFinalizerRemoval(t *testing.T) {
	machine := func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("stale-deletion", fsm.Lifecycle).
			Initial("Ready").
			State("Ready", func(ctx context.Context, r *request) fsm.Result {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-child", Namespace: r.Object.Namespace}}
				if err := r.Apply(ctx, cm); err != nil {
					return fsm.Fail(err)
				}
				return fsm.Done()
			}, fsm.Final()).
			OnDelete("Cleanup").
			// Done prunes the child: its deletion comes back as an event
			// that leads to the parent, which the cache still has.
			State("Cleanup", func(context.Context, *request) fsm.Result { return fsm.Done() }, fsm.Final()).
			Owns(&corev1.ConfigMap{})
	}
	fsmtest.Faults(t, machine, func(e *fsmtest.Env) {
		g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
		e.Create(g)
		e.AwaitReady(g)
		e.Delete(g)
		e.AwaitGone(g)
		// The late watch events of the deletion arrive meanwhile.
		time.Sleep(time.Second)
	}, fsmtest.Only(fsmtest.StaleReads), fsmtest.Lag(500*time.Millisecond))
}
