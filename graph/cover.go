package graph

// Edge coverage tells which declared edges tests have taken, the way line
// coverage tells which statements ran. An edge never taken is behaviour no
// test has seen: often a timeout or retries path, or the deletion entry.

// EdgeKey names an edge for coverage: the deletion entry has From "" and
// Kind DeleteEntry.
type EdgeKey struct {
	From, To State
	// Kind is the EdgeKind's String ("exit", "timeout", "retries") or
	// DeleteEntry.
	Kind string
}

// DeleteEntry is the Kind of the edge into the OnDelete state: deletion can
// start in any state, so the entry is one edge, not one per state.
const DeleteEntry = "delete"

// CoverageEdges lists the edges that coverage counts, each once: Edges in
// order, then the deletion entry ("" → OnDelete) when the graph has an
// OnDelete state.
func (g *Graph) CoverageEdges() []EdgeKey {
	var keys []EdgeKey
	seen := map[EdgeKey]bool{}
	add := func(k EdgeKey) {
		// Only an invalid graph, with a duplicate exit or state, repeats
		// an edge; counting it once keeps the totals honest.
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, e := range g.Edges() {
		add(keyOf(e))
	}
	if onDelete := g.OnDelete(); onDelete != "" {
		add(deleteKey(onDelete))
	}
	return keys
}

// MermaidCoverage is Mermaid with every coverage edge that taken does not
// count (a count of zero or none) labelled "never taken". Mermaid's state
// diagrams cannot style a single transition (linkStyle is for flowcharts
// only), so the label is the mark.
func (g *Graph) MermaidCoverage(taken map[EdgeKey]int) string {
	return g.mermaid(untakenIn(taken), nil)
}

// DOTCoverage is DOT with every coverage edge that taken does not count (a
// count of zero or none) drawn dashed and red and labelled "never taken";
// the label tells an untaken edge from a retries edge, which DOT draws
// dashed and red too.
func (g *Graph) DOTCoverage(taken map[EdgeKey]int) string {
	return g.dot(untakenIn(taken))
}

func untakenIn(taken map[EdgeKey]int) func(EdgeKey) bool {
	return func(k EdgeKey) bool { return taken[k] <= 0 }
}

func orNone(untaken func(EdgeKey) bool) func(EdgeKey) bool {
	if untaken == nil {
		return func(EdgeKey) bool { return false }
	}
	return untaken
}

func keyOf(e Edge) EdgeKey {
	return EdgeKey{From: e.From, To: e.To, Kind: e.Kind.String()}
}

func deleteKey(onDelete State) EdgeKey {
	return EdgeKey{To: onDelete, Kind: DeleteEntry}
}

// neverTaken adds the coverage mark to an edge's label.
func neverTaken(label string) string {
	if label == "" {
		return "never taken"
	}
	return label + " (never taken)"
}

func dotUntaken() []string {
	return []string{"style=dashed", "color=red", "fontcolor=red"}
}
