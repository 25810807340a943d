package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// hand is the workload as a careful engineer writes it on
// controller-runtime alone: server-side apply with typed apply
// configurations, and a status update only when the status changed.
//
// As registered by setupHand, it also has the two filters such an
// engineer adds: the Gadgets' watch passes a change only of the
// generation, the annotations or the labels, so that its own status
// update does not bring a Gadget back; and the children's watches drop
// their create events, as it made the children itself. A status update
// that conflicts is then requeued with the controller's backoff, since no
// event of its own would bring the Gadget back. So it converges in 1
// reconcile, 1 apply of each child and 1 status update per Gadget: the
// least the work needs.
//
// setupHandUnfiltered registers it as it was first written, without the
// filters: its own status update and its children's create events bring
// each Gadget back, about 2.4 reconciles per Gadget, and a conflicting
// status update is dropped, since the newer Gadget's event reconciles it
// again.
type hand struct {
	client client.Client
	// filtered requeues a status update that conflicts.
	filtered bool
}

// handOwner is the hand-written controller's field manager.
const handOwner = "hand"

func setupHand(mgr ctrl.Manager, workers int) error {
	return setupHandWritten(mgr, "hand", workers, true, &hand{client: mgr.GetClient(), filtered: true})
}

func setupHandUnfiltered(mgr ctrl.Manager, workers int) error {
	return setupHandWritten(mgr, "hand-unfiltered", workers, false, &hand{client: mgr.GetClient()})
}

// setupHandWritten registers a hand-written reconciler of the workload,
// with the filters of a careful engineer or without them.
func setupHandWritten(mgr ctrl.Manager, name string, workers int, filtered bool, r reconcile.Reconciler) error {
	gadgets, children := builder.WithPredicates(), builder.WithPredicates()
	if filtered {
		gadgets = builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))
		children = builder.WithPredicates(predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }})
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&v1alpha1.Gadget{}, gadgets).
		Owns(&corev1.ConfigMap{}, children).
		Owns(&corev1.Service{}, children).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// children are the ConfigMap and the Service that the hand-written
// controllers apply for g, with the labels given, if any.
func children(g *v1alpha1.Gadget, labels map[string]string) (*corev1ac.ConfigMapApplyConfiguration, *corev1ac.ServiceApplyConfiguration) {
	owner := metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind("Gadget").
		WithName(g.Name).WithUID(g.UID).
		WithController(true).WithBlockOwnerDeletion(true)
	cm := corev1ac.ConfigMap(g.Name, g.Namespace).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithData(map[string]string{"target": fmt.Sprint(g.Spec.Target)})
	svc := corev1ac.Service(g.Name, g.Namespace).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithSelector(map[string]string{"app": g.Name}).
			WithPorts(corev1ac.ServicePort().WithPort(80).WithProtocol(corev1.ProtocolTCP)))
	return cm, svc
}

func (h *hand) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var g v1alpha1.Gadget
	if err := h.client.Get(ctx, req.NamespacedName, &g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cm, svc := children(&g, nil)
	if err := h.client.Apply(ctx, cm, client.FieldOwner(handOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the ConfigMap: %w", err)
	}
	if err := h.client.Apply(ctx, svc, client.FieldOwner(handOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the Service: %w", err)
	}

	before := g.Status.DeepCopy()
	g.Status.ObservedGeneration = g.Generation
	meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{
		Type:               fsm.ConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             "Done",
		Message:            "The ConfigMap and the Service are applied.",
		ObservedGeneration: g.Generation,
	})
	if equality.Semantic.DeepEqual(before, &g.Status) {
		return ctrl.Result{}, nil
	}
	if err := h.client.Status().Update(ctx, &g); err != nil && (h.filtered || !apierrors.IsConflict(err)) {
		return ctrl.Result{}, fmt.Errorf("updating the status: %w", err)
	}
	return ctrl.Result{}, nil
}
