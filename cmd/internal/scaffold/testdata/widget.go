// The Widget machine of a project that replaced kfsm init's sample with
// its own graph: Pending is now Queued, Ready is Running, Retired is gone
// and Provisioning is new. A test of package scaffold puts it in the
// place of internal/controller/widget.go.

package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/fsm"

	"example.com/widget/api/v1alpha1"
)

// The states of a Widget.
const (
	WidgetQueued       fsm.State = "Queued"
	WidgetProvisioning fsm.State = "Provisioning"
	WidgetRunning      fsm.State = "Running"
	WidgetDeleting     fsm.State = "Deleting"
)

// WidgetHandlers holds what the Widget machine's handlers share.
type WidgetHandlers struct{}

// +kubebuilder:rbac:groups=example.com,resources=widgets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=example.com,resources=widgets/status,verbs=patch
// +kubebuilder:rbac:groups=example.com,resources=widgets/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=widgets.example.com,verbs=get

// Machine returns the Widget machine.
func (h *WidgetHandlers) Machine() *fsm.Machine[*v1alpha1.Widget] {
	return fsm.New[*v1alpha1.Widget]("widget", fsm.Lifecycle).
		Initial(WidgetQueued).
		State(WidgetQueued, h.queued, fsm.To(WidgetProvisioning)).
		State(WidgetProvisioning, h.provisioning, fsm.To(WidgetRunning)).
		State(WidgetRunning, h.running, fsm.Final()).
		OnDelete(WidgetDeleting).
		State(WidgetDeleting, h.deleting, fsm.Final()).
		Owns(&corev1.ConfigMap{})
}

type widgetRequest = fsm.Request[*v1alpha1.Widget]

func (h *WidgetHandlers) queued(_ context.Context, _ *widgetRequest) fsm.Result {
	return fsm.Next(WidgetProvisioning)
}

func (h *WidgetHandlers) provisioning(ctx context.Context, r *widgetRequest) fsm.Result {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-widget"}, Data: r.Object.Spec.Data}
	if err := r.Apply(ctx, cm); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(WidgetRunning)
}

func (h *WidgetHandlers) running(_ context.Context, _ *widgetRequest) fsm.Result {
	return fsm.Done()
}

func (h *WidgetHandlers) deleting(_ context.Context, _ *widgetRequest) fsm.Result {
	return fsm.Done()
}
