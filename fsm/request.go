package fsm

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Request is what a handler gets: the object and what it needs to act. It
// is valid until the handler returns: kfsm fills it anew for the walk's
// next handler, and once the reconcile ends, its methods panic.
type Request[T Object] struct {
	// Object is the latest copy of the object. Change its status freely:
	// kfsm writes the status once, after the walk, if anything changed.
	// Changes to anything but the status are not written.
	Object T
	// Client reads and writes other objects.
	Client client.Client
	// Log has the machine, the object and the state attached.
	Log logr.Logger
	// Clock is the machine's clock; use it instead of time.Now so that
	// tests can move time.
	Clock clock.PassiveClock
	// State is the state whose handler runs; From is the state the object
	// came from, empty for the initial state's first run.
	State, From State
	// Since is when the object entered State.
	Since time.Time
	// Attempt is 1 plus the failures of this state that Retries counts:
	// 1 until the handler fails, 2 after a failure, and so on, also
	// across the Waits between failed attempts.
	Attempt int
	// RetryAsked says that a person asked for this run with a new value
	// of AnnotationRetry (kfsm.dev/retry), for every handler of the
	// reconcile that acts on it: a handler may then refresh what it
	// would otherwise keep, such as a cached answer from outside.
	RetryAsked bool
	// Goal is the state the machine's goal function asks for, empty
	// without one. NextHop is the exit to take towards it: the first step
	// of the shortest path through the declared exits, ties going to the
	// exit declared first. It is empty when the object is at its goal.
	Goal, NextHop State

	w *walker[T]
}

// walker is the walk of the handler that got r, whose reconcile must not
// have ended.
func (r *Request[T]) walker() *walker[T] {
	if r.w == nil {
		panic("fsm: a Request was used after its reconcile ended; an action copies what it needs")
	}
	return r.w
}

// Event records a Kubernetes event about the object: eventtype is
// "Normal" or "Warning", reason a CamelCase word, note a sentence. Like
// kfsm's own events, it is recorded once the status of the walk is
// written, so a walk that is not recorded reports nothing.
func (r *Request[T]) Event(eventtype, reason, note string) {
	r.walker().notify(eventtype, reason, string(r.State), note, nil)
}

// Apply creates or updates child, an object of a type declared with Owns,
// with server-side apply: the fields set in child are applied under the
// machine's field owner, and child is updated with the server's answer.
// A namespaced child without a namespace goes in the object's namespace.
//
// An object of the child's name that kfsm did not create for this object
// is never taken over: Apply fails with an [AlreadyExistsError], unless it
// is given [Adopt] or [AdoptAndDelete].
//
// kfsm makes the object child's controller (an owner reference) when it
// can, labels it app.kubernetes.io/managed-by=kfsm with the object's UID,
// and records it in Status.Outputs. A child that cannot carry an owner
// reference (cluster-scoped under a namespaced object, or in another
// namespace) needs an OnDelete state: the deletion path deletes it, as
// garbage collection cannot. Children that are no longer desired are
// pruned; see the package doc.
//
// A new child costs one request, a create that fails if an object of the
// name exists (only then is it read); its first change moves the
// create's fields to the field owner's apply, as Apply's own.
//
// Applying an unchanged child changes nothing on the server. Fields owned
// by another field manager make Apply fail with a [ConflictError] unless
// [ForceOwnership] is given. If an Apply fails, the handler's run fails
// with its error whatever the handler returns: a child is never skipped
// silently.
//
// Typed objects are applied with every field that their JSON encoding
// has, zero values of fields without omitempty included; to apply exactly
// the fields you set, pass an *unstructured.Unstructured.
func (r *Request[T]) Apply(ctx context.Context, child client.Object, opts ...ApplyOption) error {
	return r.walker().apply(ctx, child, opts)
}

// Delete deletes child, a child that kfsm applied for the object, and
// removes it from Status.Outputs. Deleting a child that is already gone
// is not an error; an object that kfsm did not apply for this object is
// left alone, with an error. A failed Delete fails the handler's run.
func (r *Request[T]) Delete(ctx context.Context, child client.Object) error {
	return r.walker().remove(ctx, child)
}

// Action runs a long task outside the reconcile, so that it holds no
// reconcile worker, and reports where it stands; the object's status
// records it in Status.Actions, so that what it did outlives the process.
//
// The first call for a name records the action's intent (its name, key,
// state and attempt) and reports ActionPending; work starts in the
// machine's pool (see [Tuning.ActionLimit]) once the status holding the
// intent is written, never before. While it runs, calls report
// ActionPending. Once it returns, the object is reconciled at once, the
// outcome is recorded, and calls report ActionSucceeded (with the Result
// that work set) or ActionFailed with the error, on any replica and after
// any restart, for as long as the object stays in the state. A success is
// reported once, and its record dropped. A failure is reported once too,
// and its record kept as the intent of the retry: the next call (as after
// the handler's Fail and its backoff) runs the action again under the
// same key, asking Observe first if given, since an error may come after
// the effect (an answer lost, a timeout). The state's Retries bound a
// failing action. A handler that returns Done without asking about an
// action that ended, or failed, drops its record: nothing waits on it.
// Leaving the state drops its records and cancels
// its runs. Deleting the object cancels the actions started before the
// deletion, whose records stay in Status.Actions without an outcome: the
// deletion path finds there, by key, what to clean up after.
//
// If the run is lost before its outcome is recorded (the operator
// restarted, failed over, or gave up the object's shard slot), the action
// is indeterminate: its effect may have happened or not. kfsm then runs
// Observe, if given, to find out; runs work again under the same key if
// it is Idempotent; and otherwise reports ActionIndeterminate and stalls
// the object, unless the handler moves on or stops: it never guesses.
//
// work gets a context that is cancelled when the object is deleted (for
// actions started before the deletion), when the state is left, when the
// Deadline passes or when the manager stops. It must not use the Request,
// which is reused; copy what it needs.
func (r *Request[T]) Action(name string, work ActionFunc, opts ...ActionOption) Action {
	return r.walker().action(name, work, opts)
}
