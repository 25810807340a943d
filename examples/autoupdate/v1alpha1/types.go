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
	// channel is the release channel, such as "stable".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Channel string `json:"channel,omitempty"`
}

// Release is a version of the client as the version server offered it.
type Release struct {
	// version is the release's version.
	// +required
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version,omitempty"`
	// configYAML is the configuration that the release runs with.
	// +optional
	// +kubebuilder:validation:MinLength=1
	ConfigYAML string `json:"configYAML,omitempty"`
	// startupMillis is how long the release takes to start, in
	// milliseconds.
	// +optional
	StartupMillis int32 `json:"startupMillis,omitempty"`
	// broken is true for a release that fails its health check.
	// +optional
	Broken bool `json:"broken,omitempty"`
}

// Instance is a running instance of the client, in the phases of the
// auto-update talk: start, updating, processed, condemned or failed.
type Instance struct {
	// name is the instance's name on its host.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name,omitempty"`
	// version is the version the instance runs.
	// +required
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version,omitempty"`
	// address is where the instance serves, once it does.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Address string `json:"address,omitempty"`
	// phase is where the instance is in its update: start, updating,
	// processed, condemned or failed.
	// +required
	// +kubebuilder:validation:Enum=start;updating;processed;condemned;failed
	Phase string `json:"phase,omitempty"`
}

// ManagedClientStatus is what runs and what was refused.
//
// +kubebuilder:validation:MinProperties=1
type ManagedClientStatus struct {
	fsm.Status `json:",inline"`
	// version is the version the client runs.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version,omitempty"`
	// target is the release being installed, while one is.
	// +optional
	Target *Release `json:"target,omitempty"`
	// offered is the version the server offered last.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Offered string `json:"offered,omitempty"`
	// instances are the client's running instances.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	Instances []Instance `json:"instances,omitempty"`
	// failedVersions failed their health check; they are never applied
	// again.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:items:MinLength=1
	FailedVersions []string `json:"failedVersions,omitempty"`
	// healthFailures counts the failed health checks of the target in a
	// row.
	// +optional
	// +kubebuilder:validation:Minimum=1
	HealthFailures int32 `json:"healthFailures,omitempty"`
	// serverError says why the version server could not be asked, when
	// it could not.
	// +optional
	// +kubebuilder:validation:MinLength=1
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the managed client's object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which releases the client follows.
	// +required
	Spec ManagedClientSpec `json:"spec,omitzero"`
	// status is what runs and what was refused.
	// +optional
	Status ManagedClientStatus `json:"status,omitzero"`
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
