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
//
// +kubebuilder:validation:MinProperties=1
type DatabaseSpec struct {
	// desiredState is where the database should be: Running, Servicing
	// or Stopped.
	// +kubebuilder:validation:Enum=Running;Servicing;Stopped
	// +default="Running"
	// +optional
	DesiredState string `json:"desiredState,omitempty"`
	// backup requests a backup: each new value is taken once, during
	// maintenance.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][-a-z0-9]*$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Backup string `json:"backup,omitempty"`
	// config is the database's configuration; a change is applied during
	// maintenance.
	// +optional
	// +kubebuilder:validation:MinProperties=1
	Config map[string]string `json:"config,omitempty"`
}

// DatabaseStatus is where the database is and where it goes.
//
// +kubebuilder:validation:MinProperties=1
type DatabaseStatus struct {
	fsm.Status `json:",inline"`
	// desired is the state the spec asks for, as a state of the machine.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	Desired fsm.State `json:"desired,omitempty"`
	// current is the database's actual state, as its agent reports it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Current string `json:"current,omitempty"`
	// lastBackup is the latest backup request that was taken.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	LastBackup string `json:"lastBackup,omitempty"`
	// appliedConfig is the configuration the database runs with.
	// +optional
	// +kubebuilder:validation:MinProperties=1
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the database's object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the database the user asks for.
	// +required
	Spec DatabaseSpec `json:"spec,omitzero"`
	// status is where the database is and where it goes.
	// +optional
	Status DatabaseStatus `json:"status,omitzero"`
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
