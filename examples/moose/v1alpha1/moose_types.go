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

// MaxFriends is the most friends a moose makes, as many as
// status.friends holds.
const MaxFriends = 100

// MooseSpec is what a moose is.
type MooseSpec struct {
	// weight is the moose's body weight in kilograms, from 50 to 1000.
	// Heavier moose get hungry sooner.
	// +required
	// +kubebuilder:validation:Minimum=50
	// +kubebuilder:validation:Maximum=1000
	Weight int32 `json:"weight,omitempty"`
}

// MooseStatus is where the moose is and who its friends are.
//
// +kubebuilder:validation:MinProperties=1
type MooseStatus struct {
	fsm.Status `json:",inline"`
	// friends are the names of the moose of the same namespace that this
	// one has met while roaming, sorted. A moose makes at most 100
	// friends.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	Friends []string `json:"friends,omitempty"`
	// meals counts the times the moose has eaten; absent until it first
	// eats.
	// +optional
	// +kubebuilder:validation:Minimum=1
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the moose's object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the moose is.
	// +required
	Spec MooseSpec `json:"spec,omitzero"`
	// status is where the moose is in its day and who its friends are.
	// +optional
	Status MooseStatus `json:"status,omitzero"`
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
