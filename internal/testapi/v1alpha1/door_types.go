package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/fsm"
)

// DoorSpec is what a door should be. The door is the README's tutorial.
type DoorSpec struct {
	// Open asks for the door to be open.
	// +optional
	Open bool `json:"open,omitempty"`
}

// DoorStatus embeds kfsm's status, as the tutorial shows.
type DoorStatus struct {
	fsm.Status `json:",inline"`
	// Opened counts how often the door opened.
	// +optional
	Opened int32 `json:"opened,omitempty"`
}

// Door is the README tutorial's resource.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Door struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DoorSpec   `json:"spec,omitempty"`
	Status DoorStatus `json:"status,omitempty"`
}

// FSMStatus returns the part of the status that kfsm keeps.
func (d *Door) FSMStatus() *fsm.Status { return &d.Status.Status }

// DoorList is a list of doors.
//
// +kubebuilder:object:root=true
type DoorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Door `json:"items"`
}
