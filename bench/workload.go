package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// The workload: each Gadget gets a ConfigMap and a headless Service of
// its name, applied with server-side apply, and is then marked Ready.

func configMap(g *v1alpha1.Gadget) map[string]string {
	return map[string]string{"target": fmt.Sprint(g.Spec.Target)}
}

// setupKfsm registers the workload as a kfsm pipeline.
func setupKfsm(mgr ctrl.Manager, workers int) error {
	type request = fsm.Request[*v1alpha1.Gadget]
	return fsm.New[*v1alpha1.Gadget]("bench", fsm.Pipeline).
		Initial("Configured").
		State("Configured", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name}, Data: configMap(r.Object)}
			if err := r.Apply(ctx, cm); err != nil {
				return fsm.Fail(err)
			}
			return fsm.Next("Exposed")
		}, fsm.To("Exposed")).
		State("Exposed", func(ctx context.Context, r *request) fsm.Result {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
				Spec: corev1.ServiceSpec{
					ClusterIP: corev1.ClusterIPNone,
					Selector:  map[string]string{"app": r.Object.Name},
					Ports:     []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
				},
			}
			if err := r.Apply(ctx, svc); err != nil {
				return fsm.Fail(err)
			}
			return fsm.Next("Done")
		}, fsm.To("Done")).
		State("Done", nil, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Workers(workers).
		SetupWithManager(mgr)
}

// hand is the same workload as a careful engineer writes it on
// controller-runtime alone: typed apply configurations, and a status
// update only when the status changed.
type hand struct {
	client client.Client
}

const handOwner = "hand"

func setupHand(mgr ctrl.Manager, workers int) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("hand").
		// Its own status updates do not reconcile it again.
		For(&v1alpha1.Gadget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&hand{client: mgr.GetClient()})
}

func (h *hand) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var g v1alpha1.Gadget
	if err := h.client.Get(ctx, req.NamespacedName, &g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	owner := metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind("Gadget").
		WithName(g.Name).WithUID(g.UID).WithController(true).WithBlockOwnerDeletion(true)
	cm := corev1ac.ConfigMap(g.Name, g.Namespace).WithOwnerReferences(owner).WithData(configMap(&g))
	if err := h.client.Apply(ctx, cm, client.FieldOwner(handOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, err
	}
	svc := corev1ac.Service(g.Name, g.Namespace).WithOwnerReferences(owner).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithSelector(map[string]string{"app": g.Name}).
			WithPorts(corev1ac.ServicePort().WithPort(80).WithProtocol(corev1.ProtocolTCP)))
	if err := h.client.Apply(ctx, svc, client.FieldOwner(handOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, err
	}
	before := g.Status.DeepCopy()
	g.Status.ObservedGeneration = g.Generation
	meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{
		Type: fsm.ConditionReady, Status: metav1.ConditionTrue, Reason: "Done", Message: "the ConfigMap and Service are applied", ObservedGeneration: g.Generation,
	})
	if equality.Semantic.DeepEqual(before, &g.Status) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, h.client.Status().Update(ctx, &g)
}
