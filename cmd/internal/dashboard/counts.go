package dashboard

import (
	"fmt"
	"strconv"
	"time"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

// counts is where a machine's objects are, as the page shows it.
type counts struct {
	// Key names the machine in the page.
	Key string `json:"key"`
	// Rev changes whenever one of the machine's objects changes, so that
	// the page knows when to refresh what it shows of them.
	Rev uint64 `json:"rev"`
	// Synced is false until the machine's objects are all listed.
	Synced bool `json:"synced"`
	// Objects counts every object; Pending those that kfsm has not placed
	// in a state yet, Earlier those of an earlier graph version in a state
	// that the graph lacks, which the operator migrates when it next reads
	// them, and Unknown the others in a state that the graph lacks.
	Objects int `json:"objects"`
	Pending int `json:"pending"`
	Earlier int `json:"earlier"`
	Unknown int `json:"unknown"`
	// States are by state name.
	States map[string]stateCounts `json:"states"`
	// Edges are the transitions in the window, by the edge's position in
	// graph.Edges, and "start" and "delete" for the entries into the
	// initial state and into the deletion path.
	Edges map[string]int `json:"edges"`
}

type stateCounts struct {
	Objects int `json:"objects"`
	Stalled int `json:"stalled"`
}

// edgeKey finds the edge that a recorded transition took.
type edgeKey struct {
	from, to graph.State
	kind     graph.EdgeKind
}

// countObjects places objects on g: how many are in each state, and how
// many transitions each edge saw since the given time, as their histories
// record them. A history keeps only an object's latest transitions, so an
// object that moved more often than that in the window counts less.
func countObjects(g *graph.Graph, objects []inspect.Object, since time.Time) counts {
	c := counts{States: map[string]stateCounts{}, Edges: map[string]int{}}
	exact := map[edgeKey]string{}
	pair := map[[2]graph.State]string{}
	for i, e := range g.Edges() {
		id := strconv.Itoa(i)
		if _, ok := exact[edgeKey{e.From, e.To, e.Kind}]; !ok {
			exact[edgeKey{e.From, e.To, e.Kind}] = id
		}
		if _, ok := pair[[2]graph.State{e.From, e.To}]; !ok {
			pair[[2]graph.State{e.From, e.To}] = id
		}
	}
	for _, s := range g.States {
		c.States[string(s.Name)] = stateCounts{}
	}
	for _, o := range objects {
		c.Objects++
		st := o.Status.State
		switch _, known := g.Lookup(graph.State(st)); {
		case st == "":
			c.Pending++
		case !known && int(max(o.Status.GraphVersion, 1)) < max(g.Version, 1):
			c.Earlier++
		case !known:
			c.Unknown++
		default:
			sc := c.States[string(st)]
			sc.Objects++
			if stalled(o) {
				sc.Stalled++
			}
			c.States[string(st)] = sc
		}
		for _, t := range o.Status.History {
			if t.Time.Time.Before(since) {
				continue
			}
			if id := edgeOf(t, exact, pair); id != "" {
				c.Edges[id]++
			}
		}
	}
	return c
}

// edgeOf is the edge that transition t took: by its reason, the timeout
// or retries edge between its states, else their exit.
func edgeOf(t fsm.Transition, exact map[edgeKey]string, pair map[[2]graph.State]string) string {
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
	if id, ok := exact[edgeKey{graph.State(t.From), graph.State(t.To), kind}]; ok {
		return id
	}
	return pair[[2]graph.State{graph.State(t.From), graph.State(t.To)}]
}

func stalled(o inspect.Object) bool {
	c := o.Condition(fsm.ConditionStalled)
	return c != nil && c.Status == "True"
}

// shortDuration writes d as people read it: 45s, 3m12s, 2h05m, 3d4h.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		if s := int(d%time.Minute) / int(time.Second); s != 0 {
			return fmt.Sprintf("%dm%02ds", int(d/time.Minute), s)
		}
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		if m := int(d%time.Hour) / int(time.Minute); m != 0 {
			return fmt.Sprintf("%dh%02dm", int(d/time.Hour), m)
		}
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	days := int(d / (24 * time.Hour))
	if h := int(d%(24*time.Hour)) / int(time.Hour); h != 0 {
		return fmt.Sprintf("%dd%dh", days, h)
	}
	return fmt.Sprintf("%dd", days)
}
