package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/fsm"
)

// GadgetSpec is what a gadget should be.
type GadgetSpec struct {
	// Target is a number the test machines work towards.
	// +optional
	Target int32 `json:"target,omitempty"`
	// Mode steers the test handlers.
	// +optional
	Mode string `json:"mode,omitempty"`
}

// GadgetStatus embeds kfsm's status, as an operator author's type does.
type GadgetStatus struct {
	fsm.Status `json:",inline"`
	// Count is a field of the author's own that handlers update.
	// +optional
	Count int32 `json:"count,omitempty"`
	// Note is free text that handlers write.
	// +optional
	Note string `json:"note,omitempty"`
}

// Gadget is a test resource driven by kfsm machines.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GadgetSpec   `json:"spec,omitempty"`
	Status GadgetStatus `json:"status,omitempty"`
}

// FSMStatus returns the part of the status that kfsm keeps.
func (g *Gadget) FSMStatus() *fsm.Status { return &g.Status.Status }

// GadgetList is a list of gadgets.
//
// +kubebuilder:object:root=true
type GadgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Gadget `json:"items"`
}
