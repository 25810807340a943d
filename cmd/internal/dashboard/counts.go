package dashboard

import (
	"fmt"
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
	// Gaps counts the times an object moved more often between two of its
	// versions that the dashboard read than its history keeps: the edges
	// then count fewer transitions than were made.
	Gaps int `json:"gaps"`
}

type stateCounts struct {
	Objects int `json:"objects"`
	Stalled int `json:"stalled"`
}

// countObjects places objects on g: how many are in each state. The
// counts on the edges come from the machine's ledger.
func countObjects(g *graph.Graph, objects []inspect.Object) counts {
	c := counts{States: map[string]stateCounts{}}
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
	}
	return c
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
