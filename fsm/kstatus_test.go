package fsm_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// kstatus is how kubectl wait, Flux and Argo CD judge custom resources; it
// must read kfsm objects right without knowing about kfsm.
func TestKstatusReadsKfsmObjects(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("kstatus", fsm.Lifecycle).
		Initial("Working").
		State("Working", func(_ context.Context, r *request) fsm.Result {
			switch {
			case r.Object.Spec.Mode == "broken":
				return fsm.Stop("BrokenSpec", "mode broken cannot be served")
			case r.Object.Spec.Target < 1:
				return fsm.Wait(time.Minute, "WaitingForTarget")
			}
			return fsm.Next("Serving")
		}, fsm.To("Serving")).
		State("Serving", func(_ context.Context, r *request) fsm.Result {
			if r.Object.Spec.Mode == "broken" {
				return fsm.Stop("BrokenSpec", "mode broken cannot be served")
			}
			return fsm.Done()
		}, fsm.Final())
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})

	compute := func() status.Status {
		t.Helper()
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(e.get("g"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := status.Compute(&unstructured.Unstructured{Object: u})
		if err != nil {
			t.Fatal(err)
		}
		return res.Status
	}

	e.reconcile(r, "g")
	if got := compute(); got != status.InProgressStatus {
		t.Errorf("while waiting: kstatus = %s, want InProgress", got)
	}
	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 1 })
	if got := compute(); got != status.InProgressStatus {
		t.Errorf("with a spec not yet observed: kstatus = %s, want InProgress", got)
	}
	e.reconcile(r, "g")
	if got := compute(); got != status.CurrentStatus {
		t.Errorf("once Ready: kstatus = %s, want Current", got)
	}
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "broken" })
	e.reconcile(r, "g")
	if got := compute(); got != status.FailedStatus {
		t.Errorf("once Stalled: kstatus = %s, want Failed", got)
	}
}
