package fsm

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// State names a state of a machine. It is persisted in Status.State.
type State string

// Object is a Kubernetes object that a machine drives. Its status embeds
// Status, and FSMStatus returns it: the one method kfsm asks of a type.
//
//	type MooseStatus struct {
//		fsm.Status `json:",inline"`
//		Friends []string `json:"friends,omitempty"`
//	}
//
//	func (m *Moose) FSMStatus() *fsm.Status { return &m.Status.Status }
type Object interface {
	client.Object
	FSMStatus() *Status
}

// Status is where kfsm records an object's place in its machine. Embed it
// inline in the status of your type. kfsm alone writes these fields.
//
// +kubebuilder:object:generate=true
type Status struct {
	// ObservedGeneration is the generation of the spec that the status
	// describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// State is the current state of the object in its machine.
	// +optional
	State State `json:"state,omitempty"`
	// StateSince is when the object entered State.
	// +optional
	StateSince *metav1.Time `json:"stateSince,omitempty"`
	// Conditions follow the Kubernetes conventions: Ready, Reconciling and
	// Stalled (kstatus) for every machine, and one condition per state in
	// pipeline machines.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// History holds the latest transitions, oldest first.
	// +optional
	// +listType=atomic
	History []Transition `json:"history,omitempty"`
	// Failures counts the consecutive failed attempts in State.
	// +optional
	Failures int32 `json:"failures,omitempty"`
}

// Transition is one move between states.
//
// +kubebuilder:object:generate=true
type Transition struct {
	// From is empty for the first transition into the initial state.
	// +optional
	From State `json:"from,omitempty"`
	To   State `json:"to"`
	// Reason is why the object moved, in CamelCase.
	Reason string `json:"reason"`
	// Time is when the object moved.
	Time metav1.Time `json:"time"`
}

// The top-level conditions, as kstatus reads them.
const (
	// ConditionReady is True when the object has converged: its state's
	// handler returned Done.
	ConditionReady = "Ready"
	// ConditionReconciling is True while kfsm is still working on the
	// object: walking, waiting or retrying. It is absent otherwise.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when kfsm cannot make progress without a
	// change: a handler stopped, retries ran out, a transition was refused
	// or the persisted state is unknown. It is absent otherwise.
	ConditionStalled = "Stalled"
)

// Reasons that kfsm itself sets on conditions and transitions.
const (
	ReasonCreated           = "Created"
	ReasonNext              = "Next"
	ReasonTimeout           = "Timeout"
	ReasonRetriesExhausted  = "RetriesExhausted"
	ReasonDeleted           = "Deleted"
	ReasonDone              = "Done"
	ReasonPassed            = "Passed"
	ReasonHandlerFailed     = "HandlerFailed"
	ReasonIllegalTransition = "IllegalTransition"
	ReasonUnknownState      = "UnknownState"
	ReasonProgressing       = "Progressing"
)
