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

// The bounds of the status, as the markers below put them in the CRD. The
// operator refuses a release that does not fit them.
const (
	// MaxVersionLength is the longest version that the status records.
	MaxVersionLength = 64
	// MaxConfigLength is the longest configuration of a release.
	MaxConfigLength = 32768
	// MaxFailedVersions is how many failed versions the status remembers.
	MaxFailedVersions = 32
	// MaxServerErrorLength is the longest serverError; a longer message
	// is cut.
	MaxServerErrorLength = 1024
)

// Release is a version of the client as the version server offered it.
type Release struct {
	// version is the release's version.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
	// configYAML is the configuration that the release runs with, as YAML
	// of at most 32 KiB.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32768
	ConfigYAML string `json:"configYAML,omitempty"`
	// startupMillis is how long the release takes to start, in
	// milliseconds; absent for a release that starts at once.
	// +optional
	// +kubebuilder:validation:Minimum=1
	StartupMillis int32 `json:"startupMillis,omitempty"`
	// broken is true for a release that the version server marks as a
	// broken build: its instances never pass their health check.
	// +optional
	Broken *bool `json:"broken,omitempty"`
}

// InstanceState is where an instance is in an update, in the words of
// the auto-update talk.
//
// +kubebuilder:validation:Enum=updating;processed;condemned
type InstanceState string

// The states of an instance.
const (
	// InstanceUpdating: a new release is being health-checked; both its
	// instance and the one that still serves are updating.
	InstanceUpdating InstanceState = "updating"
	// InstanceProcessed: the instance serves.
	InstanceProcessed InstanceState = "processed"
	// InstanceCondemned: a newer instance is healthy, and this one is on
	// its way out.
	InstanceCondemned InstanceState = "condemned"
)

// Instance is a running instance of the client.
type Instance struct {
	// name is the instance's name on its host: the client's name, a dash
	// and the version, with dots and plus signs as dashes.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=318
	Name string `json:"name,omitempty"`
	// version is the version the instance runs.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
	// address is where the instance serves, as host:port, with an IPv6
	// host in brackets.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=261
	Address string `json:"address,omitempty"`
	// state is where the instance is in an update: updating while a new
	// release is health-checked, processed once it serves, condemned when
	// a newer instance has replaced it.
	// +required
	State InstanceState `json:"state,omitempty"`
}

// ManagedClientStatus is what runs and what was refused.
//
// +kubebuilder:validation:MinProperties=1
type ManagedClientStatus struct {
	fsm.Status `json:",inline"`
	// version is the version the client runs.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
	// target is the release being installed, while one is.
	// +optional
	Target Release `json:"target,omitzero"`
	// offered is the version the server offered last.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Offered string `json:"offered,omitempty"`
	// instances are the client's running instances: the one that serves
	// and, during an update, the one being health-checked.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	Instances []Instance `json:"instances,omitempty"`
	// failedVersions are the versions, oldest first, whose instance failed
	// its health check: they are not applied again. The status remembers
	// the latest 32.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	FailedVersions []string `json:"failedVersions,omitempty"`
	// healthFailures counts the failed health checks of the target in a
	// row.
	// +optional
	// +kubebuilder:validation:Minimum=1
	HealthFailures int32 `json:"healthFailures,omitempty"`
	// serverError says why the version server could not be asked, or why
	// its answer was refused, when it was. A message of more than 1024
	// bytes is cut.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
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
