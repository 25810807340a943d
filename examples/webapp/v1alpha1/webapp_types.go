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
	// Image is the container image that serves the app.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Replicas is how many copies serve it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	// +kubebuilder:default=1
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Config is the app's configuration, given to it as environment
	// variables through a ConfigMap.
	// +optional
	Config map[string]string `json:"config,omitempty"`
	// Expose puts a Service in front of the app.
	// +optional
	Expose bool `json:"expose,omitempty"`
	// DNSName is registered in the DNS registry while the app exists.
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}$`
	// +optional
	DNSName string `json:"dnsName,omitempty"`
}

// WebAppStatus is how the web app is doing.
type WebAppStatus struct {
	fsm.Status `json:",inline"`
	// AvailableReplicas is what the Deployment reports.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
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
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebAppSpec   `json:"spec,omitempty"`
	Status WebAppStatus `json:"status,omitempty"`
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
