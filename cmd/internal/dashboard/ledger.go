package dashboard

import (
	"strconv"
	"time"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

// ledger keeps every transition the dashboard has seen in a machine's
// objects, for the counts on the edges. An object's status.history keeps
// only its latest transitions and goes with the object; the ledger reads
// each version of each object that the watch delivers, so that it keeps
// the transitions of a busy object and of one since deleted, for as long
// as they are in the window.
//
// A watch delivers every version of an object, except across a new list
// after the watch broke: an object that moved more often than its history
// keeps in between loses transitions. The ledger counts such objects as
// gaps, and the page says so.
type ledger struct {
	edges edgeIndex
	seen  map[seenKey]seenEdge
	gaps  int
}

// seenKey is one transition of one object. A status records times to the
// second, so one object can make the same move twice with one key; seenEdge
// keeps how many times one history held it.
type seenKey struct {
	uid, from, to, reason string
	at                    int64
}

type seenEdge struct {
	edge  string
	times int
	at    time.Time
}

func newLedger(g *graph.Graph) *ledger {
	return &ledger{edges: newEdgeIndex(g), seen: map[seenKey]seenEdge{}}
}

// record reads the transitions of an object's new version, o, after the
// version the ledger saw before, if any. Those before since are not kept.
func (l *ledger) record(before *inspect.Object, o inspect.Object, since time.Time) {
	times := map[seenKey]int{}
	for _, t := range o.Status.History {
		if t.Time.Time.Before(since) {
			continue
		}
		k := seenKey{uid: o.UID, from: string(t.From), to: string(t.To), reason: t.Reason, at: t.Time.Unix()}
		times[k]++
		if times[k] > l.seen[k].times {
			l.seen[k] = seenEdge{edge: l.edges.of(t), times: times[k], at: t.Time.Time}
		}
	}
	if before != nil && lostBetween(before.Status.History, o.Status.History) {
		l.gaps++
	}
}

// lostBetween tells whether an object made transitions that neither of two
// of its consecutive histories holds: the newer one no longer holds the
// older one's latest transition, so more transitions came than it keeps.
func lostBetween(older, newer []fsm.Transition) bool {
	if len(older) == 0 || len(newer) == 0 {
		return false
	}
	last := older[len(older)-1]
	for _, t := range newer {
		if t.From == last.From && t.To == last.To && t.Reason == last.Reason && t.Time.Equal(&last.Time) {
			return false
		}
	}
	return true
}

// count is the transitions on each edge since the given time; it forgets
// those before.
func (l *ledger) count(since time.Time) map[string]int {
	out := map[string]int{}
	for k, s := range l.seen {
		if s.at.Before(since) {
			delete(l.seen, k)
			continue
		}
		if s.edge != "" {
			out[s.edge] += s.times
		}
	}
	return out
}

// edgeIndex finds the edge of the graph that a recorded transition took.
type edgeIndex struct {
	exact map[edgeKey]string
	pair  map[[2]graph.State]string
}

// edgeKey is an edge by its ends and kind.
type edgeKey struct {
	from, to graph.State
	kind     graph.EdgeKind
}

// newEdgeIndex names each edge by its position in g.Edges, as the drawing
// does.
func newEdgeIndex(g *graph.Graph) edgeIndex {
	x := edgeIndex{exact: map[edgeKey]string{}, pair: map[[2]graph.State]string{}}
	for i, e := range g.Edges() {
		id := strconv.Itoa(i)
		if _, ok := x.exact[edgeKey{e.From, e.To, e.Kind}]; !ok {
			x.exact[edgeKey{e.From, e.To, e.Kind}] = id
		}
		if _, ok := x.pair[[2]graph.State{e.From, e.To}]; !ok {
			x.pair[[2]graph.State{e.From, e.To}] = id
		}
	}
	return x
}

// of is the edge that transition t took: "start" into the initial state,
// "delete" into the deletion path, else by its reason the timeout or
// retries edge between its states, else their exit; "" if none.
func (x edgeIndex) of(t fsm.Transition) string {
	switch {
	case t.From == "":
		return "start"
	case t.Reason == fsm.ReasonDeleted:
		return "delete"
	}
	kind := graph.Exit
	switch t.Reason {
	case fsm.ReasonTimeout:
		kind = graph.TimeoutExit
	case fsm.ReasonRetriesExhausted:
		kind = graph.RetriesExit
	}
	if id, ok := x.exact[edgeKey{graph.State(t.From), graph.State(t.To), kind}]; ok {
		return id
	}
	return x.pair[[2]graph.State{graph.State(t.From), graph.State(t.To)}]
}
