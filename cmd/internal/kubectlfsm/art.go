package kubectlfsm

import (
	"fmt"
	"strings"
	"time"

	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/graph"
)

// drawing is what a text drawing of a graph shows besides the graph.
type drawing struct {
	counts  map[graph.State]int // objects per state, or nil
	current graph.State         // the state to mark, or ""
}

// art draws g as boxes and arrows in the terminal, one box per state in
// the order of a walk from the initial state, each followed by its exits:
// readable in 80 columns whatever the graph's shape. The names are the
// cluster's: each is drawn on one line, its control characters escaped.
func art(g *graph.Graph, d drawing) string {
	width := 0
	for _, s := range g.States {
		width = max(width, len([]rune(terminal.Line(string(s.Name)))))
	}
	width += 4 // the marker and the padding
	exits := map[graph.State][]graph.Edge{}
	for _, e := range g.Edges() {
		exits[e.From] = append(exits[e.From], e)
	}
	var b strings.Builder
	for _, name := range walkOrder(g) {
		spec, _ := g.Lookup(name)
		mark := "  "
		if name == d.current {
			mark = "▶ "
		}
		label := mark + terminal.Line(string(name))
		pad := width - len([]rune(label))
		fmt.Fprintf(&b, "╭%s╮\n", strings.Repeat("─", width+1))
		fmt.Fprintf(&b, "│%s%s │%s\n", label, strings.Repeat(" ", pad), notes(spec, d, name))
		fmt.Fprintf(&b, "╰%s╯\n", strings.Repeat("─", width+1))
		edges := exits[name]
		if spec.OnDelete {
			// The deletion path starts here from any state.
			fmt.Fprintf(&b, "   ◀── any state, when the object is deleted\n")
		}
		for i, e := range edges {
			branch := "├"
			if i == len(edges)-1 {
				branch = "└"
			}
			fmt.Fprintf(&b, "   %s──▶ %s%s\n", branch, terminal.Line(string(e.To)), edgeNote(e))
		}
	}
	return b.String()
}

// notes are what follows a state's box: its role and its objects.
func notes(s graph.StateSpec, d drawing, name graph.State) string {
	var parts []string
	if s.Initial {
		parts = append(parts, "initial")
	}
	if s.Final {
		parts = append(parts, "final")
	}
	if s.OnDelete {
		parts = append(parts, "on delete")
	}
	if d.counts != nil {
		n := d.counts[name]
		parts = append(parts, plural(n, "object"))
	}
	if name == d.current {
		parts = append(parts, "current")
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, " · ")
}

func edgeNote(e graph.Edge) string {
	switch e.Kind {
	case graph.TimeoutExit:
		return "   (after " + shortDuration(e.After) + " in the state)"
	case graph.RetriesExit:
		return fmt.Sprintf("   (after %d failures)", e.Limit)
	}
	return ""
}

// walkOrder lists the states breadth first from the initial state, then
// the deletion path, then whatever no walk reaches, each in declaration
// order: the order in which a reader follows the graph.
func walkOrder(g *graph.Graph) []graph.State {
	seen := map[graph.State]bool{}
	var order []graph.State
	visit := func(start graph.State) {
		if start == "" || seen[start] {
			return
		}
		queue := []graph.State{start}
		seen[start] = true
		for len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			order = append(order, s)
			for _, e := range g.Edges() {
				if e.From == s && !seen[e.To] {
					seen[e.To] = true
					queue = append(queue, e.To)
				}
			}
		}
	}
	visit(g.Initial())
	visit(g.OnDelete())
	for _, s := range g.States {
		visit(s.Name)
	}
	return order
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// shortDuration writes d as people read it: 3m12s, 2h5m, 4d.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + shortDuration(-d)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		m, s := int(d.Minutes()), int(d.Seconds())%60
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
