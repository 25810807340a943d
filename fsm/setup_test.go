package fsm_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// Guarantee 2: a machine with an invalid graph or options registers no
// controller and says why.
func TestUnderManagerAnInvalidMachineIsRefused(t *testing.T) {
	t.Parallel()
	m := fsm.New[*gadget]("invalid", fsm.Lifecycle).
		Tune(fsm.Tuning{HistoryLimit: -1}).
		Initial("Start").
		State("Start", next("Nowhere"), fsm.To("Nowhere"))
	err := m.SetupWithManager(nil)
	if err == nil || !strings.Contains(err.Error(), "Tuning.HistoryLimit -1") || !strings.Contains(err.Error(), "Nowhere") {
		t.Errorf("SetupWithManager() = %v, want every problem listed", err)
	}
}

// countingLimiter is a rate limiter that counts what it is asked.
type countingLimiter struct {
	workqueue.TypedRateLimiter[reconcile.Request]
	asked atomic.Int32
}

func (l *countingLimiter) When(req reconcile.Request) time.Duration {
	l.asked.Add(1)
	return l.TypedRateLimiter.When(req)
}

// controller-runtime's options reach the controller as they are: a For
// predicate filters, and the given rate limiter times the requeues that
// are not kfsm's backoff, such as a status write the server refused.
func TestUnderManagerControllerOptionsPassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	limiter := &countingLimiter{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, time.Second)}
	m := fsm.New[*gadget]("options", fsm.Lifecycle).
		ForOptions(builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()["skip"] != "true" }))).
		WithOptions(controller.Options{RateLimiter: limiter, MaxConcurrentReconciles: 2}).
		Initial("Work").
		State("Work", counted(&calls, done), fsm.Final())
	l := run(e, m)
	skipped := &gadget{ObjectMeta: metav1.ObjectMeta{Name: "skipped", Namespace: e.namespace, Labels: map[string]string{"skip": "true"}}}
	if err := e.direct.Create(t.Context(), skipped); err != nil {
		t.Fatal(err)
	}
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(time.Second)
	if s := e.get("skipped").Status.State; s != "" || calls.count() != 1 {
		t.Errorf("the filtered gadget is in state %q, and the handler ran %d times; want untouched, and 1", s, calls.count())
	}

	l.inject(&fault{op: "status", times: 1, err: apierrors.NewInternalError(errors.New("injected"))})
	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 1 })
	e.fe.Await("the new generation observed", func() bool {
		g := e.get("g")
		return g.Status.ObservedGeneration == g.Generation
	})
	if n := limiter.asked.Load(); n < 1 {
		t.Errorf("the given rate limiter was asked %d times, want at least once, for the refused write", n)
	}
}
