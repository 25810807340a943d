package fsm

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// State names a state of a machine. It is persisted in the status, and a
// pipeline's states name its conditions, so a name is at most 316 bytes,
// the most a condition type holds; Build refuses longer ones.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=316
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
// Its doc comments are the descriptions that kubectl explain shows, and
// its bounds are part of every CRD that embeds it. kfsm never writes more
// than they allow: [Machine.Build] refuses a machine that could (a state
// name longer than a condition type, a Tuning.HistoryLimit over the history's
// bound, a pipeline with more states than conditions fit), and
// [Request.Apply] refuses a child that the outputs cannot record (an
// [OutputLimitError]).
//
// +kubebuilder:object:generate=true
type Status struct {
	// conditions are the object's conditions, as the Kubernetes API
	// conventions and kstatus read them: Ready, Reconciling and Stalled for
	// every machine, Paused while the object is paused, and in a pipeline
	// one condition per state, named after it. A message quotes at most
	// 1024 bytes of an error.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation of the spec that the status
	// describes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// state is the object's current state in its machine: where a
	// lifecycle machine resumes, or where a pipeline's last pass rested.
	// +optional
	State State `json:"state,omitempty"`
	// stateSince is when the object entered its current state.
	// +optional
	StateSince *metav1.Time `json:"stateSince,omitempty"`
	// history holds the latest transitions, oldest first: as many as the
	// machine's history limit (10 unless configured, at most 100), and
	// always the latest one.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	History []Transition `json:"history,omitempty"`
	// outputs are the children that kfsm applied for the object and has
	// not deleted, sorted by group, kind, namespace and name. An object
	// has at most 256 children.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	Outputs []OutputRef `json:"outputs,omitempty"`
	// failures counts the failed attempts in the current state since it
	// was entered, done or given a new generation or a retry; a wait
	// between failed attempts does not reset it. Absent when there is none.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Failures int32 `json:"failures,omitempty"`
	// retryAt is when the current state's handler runs again after a
	// failure. No handler runs before, even if the object or its children
	// change, unless the spec changes or the annotation kfsm.dev/retry asks
	// for a retry.
	// +optional
	RetryAt *metav1.MicroTime `json:"retryAt,omitempty"`
	// lastHandledRetry is the value of the annotation kfsm.dev/retry that
	// kfsm acted on last. A value longer than 256 bytes is kept as its
	// SHA-256 digest, "sha256:" and 64 hexadecimal digits.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	LastHandledRetry string `json:"lastHandledRetry,omitempty"`
	// actions record the asynchronous actions of the current state: each
	// one's intent, written before its work starts, and its outcome, once
	// it ended. An action with an intent and no outcome that no process
	// runs is indeterminate: whether it took effect is unknown.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Actions []ActionRecord `json:"actions,omitempty"`
	// graphVersion is the version of the machine's graph that last wrote
	// the status; absent until the machine declares a version. A process
	// of an older version leaves the object alone.
	// +optional
	// +kubebuilder:validation:Minimum=1
	GraphVersion int32 `json:"graphVersion,omitempty"`
}

// ActionRecord is what the status keeps of one asynchronous action.
//
// +kubebuilder:object:generate=true
type ActionRecord struct {
	// name is the action's name, as its handler gives it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// key names this run of the action, from the object's UID, the state,
	// the attempt and the status write that recorded the intent. It stays
	// the same across restarts and the retries of a failed run: the
	// action's work gets it, to send as an idempotency key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Key string `json:"key,omitempty"`
	// state is the state whose handler started the action.
	// +required
	State State `json:"state,omitempty"`
	// attempt is the handler's attempt that started the action.
	// +required
	// +kubebuilder:validation:Minimum=1
	Attempt int32 `json:"attempt,omitempty"`
	// started is when the intent was recorded.
	// +required
	Started metav1.MicroTime `json:"started"`
	// heartbeat is the last sign of life of the action's run: a
	// checkpoint or a heartbeat.
	// +optional
	Heartbeat *metav1.MicroTime `json:"heartbeat,omitempty"`
	// progress is the last checkpoint of the action's run, handed to the
	// run that resumes it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Progress string `json:"progress,omitempty"`
	// outcome is Succeeded or Failed once the action ended; absent while
	// it runs and while it is indeterminate.
	// +optional
	// +kubebuilder:validation:Enum=Succeeded;Failed
	Outcome string `json:"outcome,omitempty"`
	// ended is when the outcome was recorded.
	// +optional
	Ended *metav1.MicroTime `json:"ended,omitempty"`
	// error is why a failed action failed. Once the handler was told, the
	// record stays without an outcome and with the error, as the intent
	// of the retry under the same key, until that retry starts.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Error string `json:"error,omitempty"`
	// result is what a succeeded action's work handed back.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Result string `json:"result,omitempty"`
}

// OutputRef names a child object that kfsm applied.
//
// +kubebuilder:object:generate=true
type OutputRef struct {
	// group is the child's API group; absent for the core group.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
	// kind is the child's kind.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`
	// namespace is the child's namespace; absent for a cluster-scoped
	// child.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
	// name is the child's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`
	// state is the state whose handler last applied the child, in a
	// lifecycle machine: a state's children are pruned when it is done.
	// +optional
	State State `json:"state,omitempty"`
	// uid is the child's UID, so that kfsm never deletes another object
	// that took its name.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID types.UID `json:"uid,omitempty"`
	// adopted is true for an object that existed before kfsm applied it
	// and that the operator adopted: kfsm never deletes it, and releases
	// it (removes kfsm's labels and annotations) when it is no longer
	// desired.
	// +optional
	Adopted *bool `json:"adopted,omitempty"`
	// appliedDigest is a digest of the content that kfsm last applied.
	// While the child is still at resourceVersion, the version that this
	// apply made, applying the same content again would change nothing,
	// and kfsm does not send it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	AppliedDigest string `json:"appliedDigest,omitempty"`
	// resourceVersion is the version of the child that kfsm's last apply
	// of appliedDigest made.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// Transition is one move between states.
//
// +kubebuilder:object:generate=true
type Transition struct {
	// from is the state the object left; absent for the first
	// transition, into the initial state.
	// +optional
	From State `json:"from,omitempty"`
	// to is the state the object entered.
	// +required
	To State `json:"to,omitempty"`
	// reason is why the object moved, in CamelCase: Created, Next,
	// Timeout, RetriesExhausted, Deleted, or in a pipeline the reason
	// where its pass rested.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// time is when the object moved.
	// +required
	Time metav1.Time `json:"time"`
	// traceParent is the W3C traceparent of the span of the reconcile
	// that made the transition, when it was traced: the object's later
	// reconciles link their spans to it.
	// +optional
	// +kubebuilder:validation:MinLength=55
	// +kubebuilder:validation:MaxLength=55
	TraceParent string `json:"traceParent,omitempty"`
}

// The bounds of Status, as the markers above put them in the CRD. Build
// and Request.Apply hold kfsm to them.
const (
	maxStateName  = 316 // State: a condition type's bound, for pipelines
	maxConditions = 64
	// A pipeline's conditions are kfsm's own four (Ready, Reconciling,
	// Stalled, Paused) and one per state.
	maxPipelineStates = maxConditions - 4
	maxHistory        = 100 // the largest Tuning.HistoryLimit
	maxOutputs        = 256
	maxRetryMark      = 256 // lastHandledRetry
	maxActions        = 16
	maxActionText     = 1024 // an action's progress, error and result
	maxGroup          = 253
	maxKind           = 63
	maxNamespace      = 63
	maxName           = 253
	maxUID            = 128
	maxVersion        = 128 // an output's resourceVersion
)

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
	// A new version of the graph moved the object (Machine.Version).
	ReasonMigrated = "Migrated"
	// A newer version of the graph wrote the object, which this process
	// leaves alone.
	ReasonNewerVersion = "NewerVersion"
	// An action's run was lost (a restart, a failover, a slot handed over)
	// before its outcome was recorded, and the action declares neither
	// Observe nor Idempotent: whether it took effect is unknown.
	ReasonActionIndeterminate = "ActionIndeterminate"
	ReasonProgressing         = "Progressing"
	// A child could not be applied because another field manager owns
	// some of its fields; see ConflictError.
	ReasonApplyConflict = "ApplyConflict"
	// A handler applied or deleted a child of a type the machine does not
	// declare with Owns.
	ReasonUndeclaredOutput = "UndeclaredOutput"
	// A child could not be recorded in Status.Outputs; see
	// OutputLimitError.
	ReasonOutputLimit = "OutputLimit"
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
