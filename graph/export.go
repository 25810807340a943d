package graph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The exports draw the same things distinguishably: the arrow into the
// initial state, final states (a double border in DOT, an arrow to [*] in
// Mermaid), the deletion path (entered from "on delete", its states shaded)
// and the timeout and retries edges (dashed in DOT, labelled in both).
// Edges keep declaration order and, where a state has several exits, are
// labelled with their priority: "priority 1" is the exit declared first,
// which a Next that raises several events prefers. Output depends only on
// the graph, so it can be diffed and kept in golden files.

// DOT renders the graph in Graphviz's DOT language.
func (g *Graph) DOT() string {
	return g.dot(nil)
}

// dot renders the graph in DOT, drawing the edges for which untaken is true
// as never taken; a nil untaken draws every edge plainly.
func (g *Graph) dot(untaken func(EdgeKey) bool) string {
	untaken = orNone(untaken)
	var b strings.Builder
	deletion := g.deletionSet()
	fmt.Fprintf(&b, "digraph %s {\n", dotID(g.Name))
	b.WriteString("\trankdir=LR;\n")
	b.WriteString("\tnode [shape=box, style=rounded];\n")
	if initial := g.Initial(); initial != "" {
		b.WriteString("\t\"[start]\" [shape=point, width=0.15];\n")
		fmt.Fprintf(&b, "\t\"[start]\" -> %s;\n", dotID(string(initial)))
	}
	if onDelete := g.OnDelete(); onDelete != "" {
		b.WriteString("\t\"[on delete]\" [shape=plaintext, label=\"on delete\"];\n")
		attrs := []string{"style=bold", "color=gray40"}
		if untaken(deleteKey(onDelete)) {
			attrs = append(dotUntaken(), "label="+strconv.Quote(neverTaken("")))
		}
		fmt.Fprintf(&b, "\t\"[on delete]\" -> %s%s;\n", dotID(string(onDelete)), dotAttrs(attrs))
	}
	for _, s := range g.States {
		var attrs []string
		if s.Final {
			attrs = append(attrs, "peripheries=2")
		}
		if deletion[s.Name] {
			attrs = append(attrs, `style="rounded,filled"`, "fillcolor=gray90")
		}
		fmt.Fprintf(&b, "\t%s%s;\n", dotID(string(s.Name)), dotAttrs(attrs))
	}
	exits := g.exitCounts()
	for _, e := range g.Edges() {
		var attrs []string
		switch e.Kind {
		case TimeoutExit:
			attrs = append(attrs, "style=dashed")
		case RetriesExit:
			attrs = append(attrs, "style=dashed", "color=red", "fontcolor=red")
		}
		label := edgeLabel(e, exits[e.From])
		if untaken(keyOf(e)) {
			attrs = dotUntaken()
			label = neverTaken(label)
		}
		if label != "" {
			attrs = append(attrs, "label="+strconv.Quote(label))
		}
		fmt.Fprintf(&b, "\t%s -> %s%s;\n", dotID(string(e.From)), dotID(string(e.To)), dotAttrs(attrs))
	}
	b.WriteString("}\n")
	return b.String()
}

// Mermaid renders the graph as a Mermaid stateDiagram-v2. States get short
// identifiers and show their names, so that any name is safe.
func (g *Graph) Mermaid() string {
	return g.mermaid(nil, nil)
}

// MermaidFinding is Mermaid with a finding of Check drawn on it: each
// edge of its walk labelled with its step's number ("step 1"), the
// deletion entry first where the walk starts there, the states the walk
// passes through in class walk and the states of the problem (the trap,
// the cycle, the states that cannot reach the goal) in class problem,
// the goal in class goal. Mermaid's state diagrams cannot style a single
// transition, so the numbers are the mark.
func (g *Graph) MermaidFinding(f Finding) string {
	return g.mermaid(nil, &f)
}

// mermaid renders the graph in Mermaid, labelling the edges for which
// untaken is true as never taken (a nil untaken labels none) and, with a
// finding, marking its walk.
func (g *Graph) mermaid(untaken func(EdgeKey) bool, f *Finding) string {
	untaken = orNone(untaken)
	steps := stepNumbers(f)
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	b.WriteString("    direction LR\n")
	// Declared states first, then undeclared edge targets, so that even an
	// invalid graph can be drawn to see what is wrong.
	ids := map[State]string{}
	name := func(s State) {
		if _, ok := ids[s]; !ok {
			ids[s] = "s" + strconv.Itoa(len(ids))
			fmt.Fprintf(&b, "    state %s as %s\n", strconv.Quote(string(s)), ids[s])
		}
	}
	edges := g.Edges()
	for _, s := range g.States {
		name(s.Name)
	}
	for _, e := range edges {
		name(e.To)
	}
	id := func(s State) string { return ids[s] }
	if initial := g.Initial(); initial != "" {
		fmt.Fprintf(&b, "    [*] --> %s\n", id(initial))
	}
	if onDelete := g.OnDelete(); onDelete != "" {
		label := withStep(steps, deleteKey(onDelete), "on delete")
		if untaken(deleteKey(onDelete)) {
			label = neverTaken(label)
		}
		fmt.Fprintf(&b, "    [*] --> %s: %s\n", id(onDelete), label)
	}
	exits := g.exitCounts()
	for _, e := range edges {
		label := withStep(steps, keyOf(e), edgeLabel(e, exits[e.From]))
		if untaken(keyOf(e)) {
			label = neverTaken(label)
		}
		if label != "" {
			label = ": " + label
		}
		fmt.Fprintf(&b, "    %s --> %s%s\n", id(e.From), id(e.To), label)
	}
	for _, s := range g.States {
		if s.Final {
			fmt.Fprintf(&b, "    %s --> [*]\n", id(s.Name))
		}
	}
	g.mermaidClasses(&b, id, f)
	return b.String()
}

// mermaidClasses writes the classes of the states: the deletion path
// and, with a finding, its walk, its problem and its goal, which take
// precedence.
func (g *Graph) mermaidClasses(b *strings.Builder, id func(State) string, f *Finding) {
	marked := map[State]bool{}
	var walk, problem, goal []State
	if f != nil {
		problem = dedupe(f.States, marked)
		if f.Goal != "" {
			goal = dedupe([]State{f.Goal}, marked)
		}
		walk = dedupe(append(slices.Clone(f.Path), f.Loop...), marked)
	}
	var deletion []State
	for _, s := range g.DeletionPath() {
		if !marked[s] {
			deletion = append(deletion, s)
		}
	}
	for _, c := range []struct {
		name, style string
		states      []State
	}{
		{"deletion", "fill:#e8e8e8,stroke-dasharray:4 4", deletion},
		{"walk", "fill:#fff3cd,stroke:#b58900,stroke-width:2px", walk},
		{"problem", "fill:#f8d7da,stroke:#c00,stroke-width:3px", problem},
		{"goal", "fill:#d4edda,stroke:#2e7d32,stroke-width:3px", goal},
	} {
		if len(c.states) == 0 {
			continue
		}
		fmt.Fprintf(b, "    classDef %s %s\n", c.name, c.style)
		classed := make([]string, len(c.states))
		for i, s := range c.states {
			classed[i] = id(s)
		}
		fmt.Fprintf(b, "    class %s %s\n", strings.Join(classed, ","), c.name)
	}
}

// dedupe returns the states not yet marked, once each, and marks them.
func dedupe(states []State, marked map[State]bool) []State {
	var out []State
	for _, s := range states {
		if !marked[s] {
			marked[s] = true
			out = append(out, s)
		}
	}
	return out
}

// stepNumbers numbers the edges of a finding's walk from 1: the deletion
// entry first when the walk starts there. An edge taken twice keeps its
// first number.
func stepNumbers(f *Finding) map[EdgeKey]int {
	if f == nil {
		return nil
	}
	var keys []EdgeKey
	if f.Deleting && len(f.Path) > 0 {
		keys = append(keys, deleteKey(f.Path[0]))
	}
	for _, e := range f.Steps {
		keys = append(keys, keyOf(e))
	}
	steps := map[EdgeKey]int{}
	for i, k := range keys {
		if _, ok := steps[k]; !ok {
			steps[k] = i + 1
		}
	}
	return steps
}

// withStep puts the step's number, if the edge has one, before its label.
func withStep(steps map[EdgeKey]int, k EdgeKey, label string) string {
	n, ok := steps[k]
	switch {
	case !ok:
		return label
	case label == "":
		return "step " + strconv.Itoa(n)
	}
	return "step " + strconv.Itoa(n) + ", " + label
}

// JSON renders the graph as indented JSON: the states with their roles and
// the edges with their kinds, both in declaration order.
func (g *Graph) JSON() ([]byte, error) {
	type jsonState struct {
		Name     State `json:"name"`
		Initial  bool  `json:"initial,omitempty"`
		Final    bool  `json:"final,omitempty"`
		OnDelete bool  `json:"onDelete,omitempty"`
		Deletion bool  `json:"deletionPath,omitempty"`
	}
	type jsonEdge struct {
		From     State  `json:"from"`
		To       State  `json:"to"`
		Kind     string `json:"kind"`
		Priority int    `json:"priority,omitempty"`
		After    string `json:"after,omitempty"`
		Limit    int    `json:"limit,omitempty"`
	}
	out := struct {
		Name    string      `json:"name"`
		Mode    string      `json:"mode"`
		Version int         `json:"version,omitempty"`
		States  []jsonState `json:"states"`
		Edges   []jsonEdge  `json:"edges"`
	}{Name: g.Name, Mode: g.Mode.String(), States: []jsonState{}, Edges: []jsonEdge{}}
	if g.Version > 1 {
		out.Version = g.Version
	}
	deletion := g.deletionSet()
	for _, s := range g.States {
		out.States = append(out.States, jsonState{Name: s.Name, Initial: s.Initial, Final: s.Final, OnDelete: s.OnDelete, Deletion: deletion[s.Name]})
	}
	for _, e := range g.Edges() {
		je := jsonEdge{From: e.From, To: e.To, Kind: e.Kind.String(), Priority: e.Priority, Limit: e.Limit}
		if e.Kind == TimeoutExit {
			je.After = e.After.String()
		}
		out.Edges = append(out.Edges, je)
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// CompactJSON is JSON without its spaces and its final newline: the form
// a published graph, a lock's earlier versions and a coverage profile
// carry on one line.
func (g *Graph) CompactJSON() ([]byte, error) {
	doc, err := g.JSON()
	if err != nil {
		return nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

func (g *Graph) deletionSet() map[State]bool {
	set := map[State]bool{}
	for _, s := range g.DeletionPath() {
		set[s] = true
	}
	return set
}

func (g *Graph) exitCounts() map[State]int {
	counts := map[State]int{}
	for _, s := range g.States {
		counts[s.Name] += len(s.Exits)
	}
	return counts
}

// edgeLabel is the text on edge e, whose state has the given number of
// exits: its timeout, its retries, or its priority among several exits.
func edgeLabel(e Edge, exits int) string {
	switch {
	case e.Kind == TimeoutExit:
		return "timeout " + shortDuration(e.After)
	case e.Kind == RetriesExit:
		return fmt.Sprintf("after %d failures", e.Limit)
	case exits > 1:
		return "priority " + strconv.Itoa(e.Priority)
	}
	return ""
}

// shortDuration drops the zero units that time.Duration.String keeps:
// 30m rather than 30m0s, 1h rather than 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func dotID(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

func dotAttrs(attrs []string) string {
	if len(attrs) == 0 {
		return ""
	}
	return " [" + strings.Join(attrs, ", ") + "]"
}
