// Package v1alpha1 is the Database API of the database example.
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

// GroupVersion is the API group and version of Database.
var GroupVersion = schema.GroupVersion{Group: "examples.kfsm.dev", Version: "v1alpha1"}

// AddToScheme adds Database to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Database{}, &DatabaseList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// DatabaseSpec is the database the user asks for.
type DatabaseSpec struct {
	// DesiredState is where the database should be.
	// +kubebuilder:validation:Enum=Running;Servicing;Stopped
	// +kubebuilder:default=Running
	// +optional
	DesiredState string `json:"desiredState,omitempty"`
	// Backup requests a backup: each new value is taken once, during
	// maintenance.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][-a-z0-9]*$`
	// +optional
	Backup string `json:"backup,omitempty"`
	// Config is the database's configuration; a change is applied during
	// maintenance.
	// +optional
	Config map[string]string `json:"config,omitempty"`
}

// DatabaseStatus is where the database is and where it goes.
type DatabaseStatus struct {
	fsm.Status `json:",inline"`
	// Desired is the state the spec asks for, as a state of the machine.
	// +optional
	Desired fsm.State `json:"desired,omitempty"`
	// Current is the database's actual state, as its agent reports it.
	// +optional
	Current string `json:"current,omitempty"`
	// LastBackup is the latest backup request that was taken.
	// +optional
	LastBackup string `json:"lastBackup,omitempty"`
	// AppliedConfig is the configuration the database runs with.
	// +optional
	AppliedConfig map[string]string `json:"appliedConfig,omitempty"`
}

// Database is an application driven through its lifecycle towards the
// state its spec asks for.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Desired",type=string,JSONPath=`.spec.desiredState`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.status.current`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Database struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DatabaseSpec   `json:"spec,omitempty"`
	Status DatabaseStatus `json:"status,omitempty"`
}

// FSMStatus returns the part of the status that kfsm keeps.
func (d *Database) FSMStatus() *fsm.Status { return &d.Status.Status }

// DatabaseList is a list of databases.
//
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Database `json:"items"`
}
