// Package v1alpha1 is the ManagedClient API of the auto-update example.
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

// GroupVersion is the API group and version of ManagedClient.
var GroupVersion = schema.GroupVersion{Group: "examples.kfsm.dev", Version: "v1alpha1"}

// AddToScheme adds ManagedClient to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ManagedClient{}, &ManagedClientList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// ManagedClientSpec says which releases a client follows.
type ManagedClientSpec struct {
	// Channel is the release channel, such as "stable".
	// +kubebuilder:validation:MinLength=1
	Channel string `json:"channel"`
}

// Release is a version of the client as the version server offered it.
type Release struct {
	Version       string `json:"version"`
	ConfigYAML    string `json:"configYAML,omitempty"`
	StartupMillis int32  `json:"startupMillis,omitempty"`
	Broken        bool   `json:"broken,omitempty"`
}

// Instance is a running instance of the client, in the phases of the
// auto-update talk: start, updating, processed, condemned or failed.
type Instance struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Address string `json:"address,omitempty"`
	Phase   string `json:"phase"`
}

// ManagedClientStatus is what runs and what was refused.
type ManagedClientStatus struct {
	fsm.Status `json:",inline"`
	// Version is the version the client runs.
	// +optional
	Version string `json:"version,omitempty"`
	// Target is the release being installed, while one is.
	// +optional
	Target *Release `json:"target,omitempty"`
	// Offered is the version the server offered last.
	// +optional
	Offered string `json:"offered,omitempty"`
	// Instances are the client's running instances.
	// +optional
	// +listType=atomic
	Instances []Instance `json:"instances,omitempty"`
	// FailedVersions failed their health check; they are never applied
	// again.
	// +optional
	// +listType=set
	FailedVersions []string `json:"failedVersions,omitempty"`
	// HealthFailures counts the failed health checks of the target in a
	// row.
	// +optional
	HealthFailures int32 `json:"healthFailures,omitempty"`
	// ServerError says why the version server could not be asked, when
	// it could not.
	// +optional
	ServerError string `json:"serverError,omitempty"`
}

// ManagedClient is a client that a state machine keeps on the latest good
// release of its channel.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Failed",type=string,JSONPath=`.status.failedVersions`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ManagedClient struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ManagedClientSpec   `json:"spec,omitempty"`
	Status ManagedClientStatus `json:"status,omitempty"`
}

// FSMStatus returns the part of the status that kfsm keeps.
func (c *ManagedClient) FSMStatus() *fsm.Status { return &c.Status.Status }

// ManagedClientList is a list of managed clients.
//
// +kubebuilder:object:root=true
type ManagedClientList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ManagedClient `json:"items"`
}
