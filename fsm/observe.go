package fsm

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kfsm/kfsm/graph"
)

// Walk is what one reconcile of an object did: the handlers it ran, the
// declared edges it took, and when it asked to run again. Walk
// observers get one for every reconcile that reached the machine's graph,
// written or not; fsmtest builds its step driver, its counts and its edge
// coverage on them.
type Walk struct {
	Object types.NamespacedName
	// UID tells apart objects that had the same name one after the other.
	UID types.UID
	// ResourceVersion is that of the copy of the object the handlers saw.
	ResourceVersion string
	Steps           []Step
	// Migrated is the move of an object of an earlier graph version from
	// its state there to its state in this version, as status.history
	// records it (Reason ReasonMigrated), when this walk made one; nil
	// otherwise. It is no edge of the graph, and comes before Edges.
	Migrated *Transition
	// Edges are the declared edges taken, in order: exits, timeouts,
	// retries edges and the entry into the deletion path (From empty, Kind
	// graph.DeleteEntry). A pipeline takes its edges again on every pass.
	Edges []graph.EdgeKey
	// Committed says that the walk's writes went through, so that what
	// Steps and Edges say is recorded in the status. When false, the walk
	// was thrown away and runs again.
	Committed bool
	// RequeueAfter is when the machine's clock runs the object again, or
	// zero; Soon says it runs again at once, to continue what this walk
	// left (a state entered twice, a write that raced).
	RequeueAfter time.Duration
	Soon         bool
	// Err is what the reconcile returned: a *HandlerError for a failed
	// handler, or a write's error.
	Err error
	// Began and Ended are when the reconcile held the object, by the wall
	// clock (not the machine's): from after its read of the object to
	// after its last write. A sharded machine's replica holds the
	// object's slot all that time, so that the spans of two replicas'
	// walks of one object never overlap.
	Began, Ended time.Time
}

// Step is one run of a handler.
type Step struct {
	State   State
	Attempt int
	Result  ResultKind
	// Next is the exit a Next took; empty when the transition was refused.
	Next State
	// After and Reason are those of a Wait, or the reason of a Stop.
	After  time.Duration
	Reason string
	// Err is a Fail's error, a recovered panic included.
	Err error
}

// ResultKind names what a handler returned.
type ResultKind string

// The kinds of Result.
const (
	ResultNext ResultKind = "Next"
	ResultWait ResultKind = "Wait"
	ResultDone ResultKind = "Done"
	ResultFail ResultKind = "Fail"
	ResultStop ResultKind = "Stop"
)

// Kind says which of Next, Wait, Done, Fail or Stop r is. The zero Result
// is a failure.
func (r Result) Kind() ResultKind {
	return [...]ResultKind{resultNone: ResultFail, resultNext: ResultNext, resultWait: ResultWait, resultDone: ResultDone, resultFail: ResultFail, resultStop: ResultStop}[r.kind]
}

// step records a handler run for the observers.
func (w *walker[T]) step(def *stateDef[T], attempt int, res Result, next State) {
	if len(w.r.m.walkObservers) == 0 {
		return
	}
	s := Step{State: def.name, Attempt: attempt, Result: res.Kind(), Next: next, Reason: res.reason, Err: res.err}
	if res.kind == resultWait {
		s.After = res.after
	}
	w.steps = append(w.steps, s)
}

// took records the declared edge that a move for reason took, for the
// observers.
func (w *walker[T]) took(from, to State, reason string) {
	if len(w.r.m.walkObservers) == 0 {
		return
	}
	w.edges = append(w.edges, graph.EdgeKey{From: graph.State(from), To: graph.State(to), Kind: edgeKinds[reason]})
}

// observed tells the observers what a walk did.
func (r *reconciler[T]) observed(ctx context.Context, key types.NamespacedName, w *walker[T], res reconcileResult) {
	walk := Walk{
		Object: key, UID: w.before.GetUID(), ResourceVersion: w.before.GetResourceVersion(),
		Steps: w.steps, Edges: w.edges, Committed: res.committed,
		RequeueAfter: res.after, Soon: res.soon, Err: res.err,
		Began: res.began, Ended: res.ended,
	}
	for _, n := range w.notices {
		if n.moved && n.t.Reason == ReasonMigrated {
			t := n.t
			walk.Migrated = &t
		}
	}
	for _, observe := range r.m.walkObservers {
		observe(ctx, walk)
	}
}
