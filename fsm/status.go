package fsm

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// Outputs are the children that kfsm applied for the object and has
	// not deleted, sorted.
	// +optional
	// +listType=atomic
	Outputs []OutputRef `json:"outputs,omitempty"`
	// Failures counts the consecutive failed attempts in State.
	// +optional
	Failures int32 `json:"failures,omitempty"`
	// RetryAt is when the handler of State runs again after a failure. No
	// handler runs before, even if the object or its children change,
	// unless the spec changes or a retry is requested (AnnotationRetry).
	// +optional
	RetryAt *metav1.MicroTime `json:"retryAt,omitempty"`
	// LastHandledRetry is the value of the AnnotationRetry annotation that
	// kfsm acted on last.
	// +optional
	LastHandledRetry string `json:"lastHandledRetry,omitempty"`
}

// OutputRef names a child object that kfsm applied.
//
// +kubebuilder:object:generate=true
type OutputRef struct {
	// Group is the child's API group, empty for the core group.
	// +optional
	Group string `json:"group,omitempty"`
	Kind  string `json:"kind"`
	// Namespace is empty for a cluster-scoped child.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// State is the lifecycle state whose handler last applied the child;
	// pruning is by state in lifecycle machines.
	// +optional
	State State `json:"state,omitempty"`
	// UID identifies the child, so that kfsm never deletes another object
	// that took its name.
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// Adopted is set for an object that existed before kfsm applied it and
	// that was adopted with fsm.Adopt: kfsm never deletes it.
	// +optional
	Adopted bool `json:"adopted,omitempty"`
	// AppliedDigest is a digest of the content that kfsm last applied, and
	// ResourceVersion the version of the child that this apply made.
	// While the child is still at that version, applying the same content
	// again would change nothing, and kfsm does not send it.
	// +optional
	AppliedDigest string `json:"appliedDigest,omitempty"`
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
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
	// change: a handler stopped, retries ran out, a transition was refused,
	// the persisted state is unknown or the status cannot be written. It is
	// absent otherwise.
	ConditionStalled = "Stalled"
	// ConditionPaused is True while the object carries AnnotationPaused:
	// no handler runs. It is absent otherwise.
	ConditionPaused = "Paused"
)

// What kfsm reads and writes on objects besides their status. Each is
// also documented in the package doc.
const (
	// AnnotationPaused, set to "true" on an object, stops kfsm from running
	// any handler for it, the deletion path included, until it is removed
	// or set to anything else. The object gets the Paused condition.
	AnnotationPaused = "kfsm.dev/paused"
	// AnnotationRetry asks kfsm to run the current state's handler again
	// now: set it to a new value (a timestamp, say). A Stalled object
	// resumes and a failing state's backoff ends. Status.LastHandledRetry
	// records the value acted on.
	AnnotationRetry = "kfsm.dev/retry"

	// LabelManagedBy is set to "kfsm" on every child that kfsm applies.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelMachine names the machine that applied a child.
	LabelMachine = "kfsm.dev/machine"
	// LabelOwnerUID is the UID of a child's parent. kfsm finds children by
	// it (also those a crash kept out of the status) and never deletes an
	// object without it.
	LabelOwnerUID = "kfsm.dev/owner-uid"
	// AnnotationOwner is the parent's namespace/name: it leads from a
	// child that carries no owner reference back to its parent.
	AnnotationOwner = "kfsm.dev/owner"
	// AnnotationState is the lifecycle state whose handler last applied a
	// child; pruning is by state in lifecycle machines.
	AnnotationState = "kfsm.dev/state"
	// AnnotationAdopted is "true" on an object that existed before kfsm
	// applied it and that a handler adopted with fsm.Adopt: kfsm never
	// deletes it, and releases it (removes its labels and annotations)
	// when it is no longer desired.
	AnnotationAdopted = "kfsm.dev/adopted"
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
	// A child could not be applied because another field manager owns
	// some of its fields; see ConflictError.
	ReasonApplyConflict = "ApplyConflict"
	// A handler applied or deleted a child of a type the machine does not
	// declare with Owns.
	ReasonUndeclaredOutput = "UndeclaredOutput"
	// A child that was no longer desired was deleted.
	ReasonPruned = "Pruned"
	// The object's goal is not a state, or no path leads there.
	ReasonGoalUnreachable = "GoalUnreachable"
	// A child could not be applied because an object of its name exists
	// that kfsm did not create for this parent; see AlreadyExistsError.
	ReasonAlreadyExists = "AlreadyExists"
	// An adopted child that is no longer desired was left in place without
	// kfsm's labels.
	ReasonReleased = "Released"
	// The status that a walk produced could not be written.
	ReasonStatusWriteFailed = "StatusWriteFailed"
	// The object carries AnnotationPaused, or no longer does.
	ReasonPaused  = "Paused"
	ReasonResumed = "Resumed"
	// The object's AnnotationRetry changed.
	ReasonRetryRequested = "RetryRequested"
	// An object vanished before its deletion path was done (its finalizer
	// was removed by someone else); kfsm deleted the children it left.
	ReasonOrphansDeleted = "OrphansDeleted"
)
