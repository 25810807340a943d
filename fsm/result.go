package fsm

import (
	"errors"
	"fmt"
	"time"
)

// Result is what a handler returns: one of Next, Wait, Done, Fail or Stop.
// Each means one thing; there are no combinations.
type Result struct {
	kind    resultKind
	next    State
	also    []State // more events, for Next with several
	after   time.Duration
	reason  string
	message string
	err     error
}

type resultKind int

const (
	// The zero Result is not a valid answer; kfsm treats it as a failure.
	resultNone resultKind = iota
	resultNext
	resultWait
	resultDone
	resultFail
	resultStop
)

// Next moves the object to state to, which must be one of the current
// state's declared exits, and runs to's handler in the same reconcile
// (unless to was already run in this reconcile; then the next reconcile
// continues, at once).
//
// Given several events, Next takes the exit that was declared first among
// those raised: with fsm.To(Servicing, Stopping), Next(Stopping,
// Servicing) moves to Servicing. The event [Default] stands for the last
// declared exit. Every event must name an exit; one that does not makes
// the transition illegal, whatever the others say.
func Next(to State, also ...State) Result { return Result{kind: resultNext, next: to, also: also} }

// Default is the event that takes a state's last declared exit, its
// default child in OKT's words. Pass it to Next.
const Default State = "(default)"

// Wait keeps the object in its state and runs the handler again after the
// given time, or on the next change of the object or its children when
// after is zero. The object is Reconciling, not Ready; reason says why, in
// CamelCase (for example "WaitingForDeployment").
func Wait(after time.Duration, reason string) Result {
	return Result{kind: resultWait, after: after, reason: reason}
}

// Done says that the object has converged in its state: it is Ready. The
// handler runs again only when something changes. On the deletion path,
// Done in a final state lets kfsm remove its finalizer.
func Done() Result { return Result{kind: resultDone} }

// Fail reports that the handler could not do its work. kfsm retries with
// exponential backoff, counts the failure, and once the state's Retries are
// exhausted takes the retries edge or stalls.
func Fail(err error) Result {
	if err == nil {
		err = errors.New("handler failed without an error")
	}
	return Result{kind: resultFail, err: err}
}

// Stop gives up on the object until its spec changes: it is Stalled with
// the given reason (CamelCase) and message, and no handler runs for this
// generation. Use it for problems that retrying cannot fix.
func Stop(reason, message string) Result {
	return Result{kind: resultStop, reason: reason, message: message}
}

// HandlerError is the error that a reconcile returns when a state's
// handler failed, or panicked, and is to be retried: controller-runtime
// counts it in controller_runtime_reconcile_errors_total and logs it as a
// "Reconciler error", and the machine's rate limiter requeues the object
// when RetryAfter has passed, not sooner. When the state's retries are
// exhausted and the object stalls, the reconcile returns it wrapped in
// reconcile.TerminalError, and nothing is requeued.
type HandlerError struct {
	State State
	// Attempt counts the failures in the state, this one included, as
	// Retries counts them.
	Attempt int
	// RetryAfter is when the handler runs again; zero once retries are
	// exhausted.
	RetryAfter time.Duration
	// Err is the handler's error, as the machine's redaction left it.
	Err error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("state %s failed (attempt %d): %v", e.State, e.Attempt, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }
