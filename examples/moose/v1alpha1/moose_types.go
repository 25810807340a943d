// Package v1alpha1 is the Moose API of the moose example.
//
// +kubebuilder:object:generate=true
// +groupName=examples.kfsm.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kfsm/kfsm/fsm"
)

// GroupVersion is the API group and version of Moose.
var GroupVersion = schema.GroupVersion{Group: "examples.kfsm.dev", Version: "v1alpha1"}

// AddToScheme adds Moose to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Moose{}, &MooseList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// MooseSpec is what a moose is.
type MooseSpec struct {
	// Weight is the moose's body weight in kilograms. Heavier moose get
	// hungry sooner.
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=1000
	Weight int32 `json:"weight"`
}

// MooseStatus is where the moose is and who its friends are.
type MooseStatus struct {
	fsm.Status `json:",inline"`
	// Friends are the moose of the same namespace this one has met while
	// roaming, sorted.
	// +optional
	// +listType=set
	Friends []string `json:"friends,omitempty"`
	// Meals counts the times the moose has eaten.
	// +optional
	Meals int32 `json:"meals,omitempty"`
}

// Moose is one animal of the herd. As in the Krator demo, its name must
// start with "m".
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=moose,singular=moose,shortName=mo
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.startsWith('m')",message="a moose's name must start with \"m\""
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Friends",type=string,JSONPath=`.status.friends`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Moose struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MooseSpec   `json:"spec,omitempty"`
	Status MooseStatus `json:"status,omitempty"`
}

// FSMStatus returns the part of the status that kfsm keeps.
func (m *Moose) FSMStatus() *fsm.Status { return &m.Status.Status }

// MooseList is a list of moose.
//
// +kubebuilder:object:root=true
type MooseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Moose `json:"items"`
}
