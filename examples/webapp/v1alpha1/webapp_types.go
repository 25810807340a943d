// Package v1alpha1 is the WebApp API of the web app example.
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

// GroupVersion is the API group and version of WebApp.
var GroupVersion = schema.GroupVersion{Group: "examples.kfsm.dev", Version: "v1alpha1"}

// AddToScheme adds WebApp to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &WebApp{}, &WebAppList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// WebAppSpec is the web app that should run.
type WebAppSpec struct {
	// image is the container image that serves the app.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// replicas is how many copies serve it, from 0 to 20; 1 unless set.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	// +default=1
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// config is the app's configuration, given to it as environment
	// variables through a ConfigMap.
	// +optional
	// +kubebuilder:validation:MinProperties=1
	Config map[string]string `json:"config,omitempty"`
	// expose puts a Service in front of the app when true; when false or
	// absent, the app has none.
	// +optional
	Expose *bool `json:"expose,omitempty"`
	// dnsName is registered in the DNS registry while the app exists.
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	DNSName string `json:"dnsName,omitempty"`
}

// WebAppStatus is how the web app is doing.
//
// +kubebuilder:validation:MinProperties=1
type WebAppStatus struct {
	fsm.Status `json:",inline"`
	// availableReplicas is how many copies the Deployment reports
	// available; absent when none is.
	// +optional
	// +kubebuilder:validation:Minimum=1
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// registeredDNSName is the DNS name that the operator registered for
	// the app: the record it removes when spec.dnsName changes or the app
	// is deleted, and the only one. Absent while none is registered.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	RegisteredDNSName string `json:"registeredDNSName,omitempty"`
}

// WebApp is a web app: a Deployment, its configuration, perhaps a Service,
// and a DNS name.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="DNS",type=string,JSONPath=`.spec.dnsName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WebApp struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the web app's object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the web app that should run.
	// +required
	Spec WebAppSpec `json:"spec,omitzero"`
	// status is how the web app is doing: its place in the machine, its
	// available replicas and its registered DNS name.
	// +optional
	Status WebAppStatus `json:"status,omitzero"`
}

// FSMStatus returns the part of the status that kfsm keeps.
func (w *WebApp) FSMStatus() *fsm.Status { return &w.Status.Status }

// WebAppList is a list of web apps.
//
// +kubebuilder:object:root=true
type WebAppList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebApp `json:"items"`
}
