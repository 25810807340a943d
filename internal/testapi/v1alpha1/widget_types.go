// Package v1alpha1 is a small API used to test kfsm against a real API
// server: its CRD is generated with controller-gen like an author's would be.
//
// +kubebuilder:object:generate=true
// +groupName=testing.kfsm.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of Widget.
var GroupVersion = schema.GroupVersion{Group: "testing.kfsm.dev", Version: "v1alpha1"}

// AddToScheme adds the test types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Widget{}, &WidgetList{}, &Gadget{}, &GadgetList{}, &Door{}, &DoorList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// WidgetSpec is what a widget should be.
type WidgetSpec struct {
	// Size of the widget.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Size int32 `json:"size"`
	// Color of the widget.
	// +kubebuilder:validation:Enum=red;green;blue
	// +optional
	Color string `json:"color,omitempty"`
}

// WidgetStatus is what a widget is.
type WidgetStatus struct {
	// Phase is where the widget is in its life.
	// +optional
	Phase string `json:"phase,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Widget is a test resource with a status subresource.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WidgetSpec   `json:"spec"`
	Status WidgetStatus `json:"status,omitempty"`
}

// WidgetList is a list of widgets.
//
// +kubebuilder:object:root=true
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}
