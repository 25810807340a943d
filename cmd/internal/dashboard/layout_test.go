package dashboard

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/examples/autoupdate"
	"github.com/kfsm/kfsm/examples/database"
	"github.com/kfsm/kfsm/examples/moose"
	"github.com/kfsm/kfsm/examples/webapp"
	"github.com/kfsm/kfsm/graph"
)

// drawnGraphs are the graphs whose drawings are checked: the golden
// files' graphs, the examples' machines and a 50-state one.
func drawnGraphs() map[string]*graph.Graph {
	graphs := map[string]*graph.Graph{
		"fleet":      fleetGraph(),
		"moose":      moose.NewHerd(1).Machine().Graph(),
		"webapp":     (&webapp.Operator{}).Machine().Graph(),
		"autoupdate": (&autoupdate.Operator{}).Machine().Graph(),
		"database":   (&database.Operator{}).Machine().Graph(),
	}
	for name, g := range testGraphs {
		graphs[name] = g
	}
	return graphs
}

// A drawing shows every state and every edge once, and nothing in it
// hides anything else: no two boxes overlap, no edge passes through a box
// other than its ends, and no edge's text overlaps a box or another text.
// The texts are sized by textWidth, on the wide side of what browsers
// draw.
func TestDrawingsDoNotOverlap(t *testing.T) {
	for name, g := range drawnGraphs() {
		t.Run(name, func(t *testing.T) {
			d, err := layoutAfresh(g)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range overlaps(d) {
				t.Error(p)
			}
			svg := d.svg(g.Name, "m1")
			if got, want := strings.Count(svg, `<a class="state`), len(g.States); got != want {
				t.Errorf("the drawing has %d boxes for %d states", got, want)
			}
			if got, want := strings.Count(svg, `<g class="edge `), len(g.Edges()); got != want {
				t.Errorf("the drawing has %d edges for %d in the graph", got, want)
			}
		})
	}
}

// overlaps describes what in d hides something else.
func overlaps(d *drawing) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	drawn := map[graph.State]int{}
	for _, b := range d.boxes {
		drawn[b.spec.Name]++
	}
	for _, s := range d.graph.States {
		if drawn[s.Name] != 1 {
			report("state %s is drawn %d times", s.Name, drawn[s.Name])
		}
	}
	edges := map[int]int{}
	for _, e := range d.edges {
		edges[e.index]++
	}
	for i, e := range d.graph.Edges() {
		if edges[i] != 1 {
			report("edge %s → %s (%s) is drawn %d times", e.From, e.To, e.Kind, edges[i])
		}
	}
	bounds := rect{0, 0, d.width, d.height}
	for i, a := range d.boxes {
		if !within(a.rect, bounds) {
			report("box %s at %v is outside the drawing's %v × %v", a.spec.Name, a.rect, d.width, d.height)
		}
		for _, b := range d.boxes[i+1:] {
			if a.overlaps(b.rect) {
				report("boxes %s and %s overlap", a.spec.Name, b.spec.Name)
			}
		}
	}
	type text struct {
		what string
		rect
	}
	var texts []text
	for _, e := range d.edges {
		what := fmt.Sprintf("edge %s → %s (%s)", e.edge.From, e.edge.To, e.edge.Kind)
		texts = append(texts, text{what + "'s text", e.text})
		problems = append(problems, crossesBoxes(d, what, e.path, e.from, e.to)...)
	}
	for _, e := range d.entries {
		what := fmt.Sprintf("the %s arrow", e.key)
		texts = append(texts, text{what + "'s text", e.text})
		problems = append(problems, crossesBoxes(d, what, e.path, nil, e.to)...)
	}
	for i, a := range texts {
		if !within(a.rect, bounds) {
			report("%s at %v is outside the drawing", a.what, a.rect)
		}
		for _, b := range d.boxes {
			if a.overlaps(b.rect) {
				report("%s overlaps box %s", a.what, b.spec.Name)
			}
		}
		for _, b := range texts[i+1:] {
			if a.overlaps(b.rect) {
				report("%s overlaps %s", a.what, b.what)
			}
		}
	}
	return problems
}

func within(r, bounds rect) bool {
	const slack = 0.5
	return r.x >= bounds.x-slack && r.y >= bounds.y-slack && r.x+r.w <= bounds.x+bounds.w+slack && r.y+r.h <= bounds.y+bounds.h+slack
}

// endSlack is how far from its ends an edge may be inside its end boxes,
// where it meets their borders.
const endSlack = 4.0

// crossesBoxes samples the Bézier path about every half pixel and reports
// the boxes it passes through: any box but its ends, and its ends away
// from where it leaves and enters them.
func crossesBoxes(d *drawing, what string, path []point, from, to *box) []string {
	samples := sampleBezier(path, 0.5)
	total := samples[len(samples)-1].along
	var problems []string
	if from != nil && distance(path[0], from.rect) > endSlack {
		problems = append(problems, fmt.Sprintf("%s starts at (%.1f, %.1f), away from box %s", what, path[0].x, path[0].y, from.spec.Name))
	}
	if end := path[len(path)-1]; distance(end, to.rect) > endSlack {
		problems = append(problems, fmt.Sprintf("%s ends at (%.1f, %.1f), away from box %s", what, end.x, end.y, to.spec.Name))
	}
	for _, b := range d.boxes {
		inner := rect{b.x + 0.5, b.y + 0.5, b.w - 1, b.h - 1}
		for _, s := range samples {
			if !inner.contains(s.point) {
				continue
			}
			if b == from && s.along <= endSlack || b == to && total-s.along <= endSlack {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s passes through box %s at (%.1f, %.1f)", what, b.spec.Name, s.x, s.y))
			break
		}
	}
	bounds := rect{-0.5, -0.5, d.width + 1, d.height + 1}
	for _, s := range samples {
		if !bounds.contains(s.point) {
			problems = append(problems, fmt.Sprintf("%s leaves the drawing at (%.1f, %.1f)", what, s.x, s.y))
			break
		}
	}
	return problems
}

type sample struct {
	point
	along float64 // the path's length up to the point
}

// sampleBezier returns points on a path of cubic Bézier segments, about
// step apart, with how far along the path each is.
func sampleBezier(path []point, step float64) []sample {
	out := []sample{{point: path[0]}}
	for i := 1; i+2 < len(path); i += 3 {
		p0, p1, p2, p3 := path[i-1], path[i], path[i+1], path[i+2]
		hull := dist(p0, p1) + dist(p1, p2) + dist(p2, p3)
		n := max(1, int(math.Ceil(hull/step)))
		for j := 1; j <= n; j++ {
			t := float64(j) / float64(n)
			u := 1 - t
			q := point{
				u*u*u*p0.x + 3*u*u*t*p1.x + 3*u*t*t*p2.x + t*t*t*p3.x,
				u*u*u*p0.y + 3*u*u*t*p1.y + 3*u*t*t*p2.y + t*t*t*p3.y,
			}
			last := out[len(out)-1]
			out = append(out, sample{q, last.along + dist(last.point, q)})
		}
	}
	return out
}

func dist(a, b point) float64 { return math.Hypot(a.x-b.x, a.y-b.y) }

// overlaps tells whether r and s share more than an edge.
func (r rect) overlaps(s rect) bool {
	return r.x < s.x+s.w && s.x < r.x+r.w && r.y < s.y+s.h && s.y < r.y+r.h
}

// contains tells whether p is inside r, not on its edge.
func (r rect) contains(p point) bool {
	return p.x > r.x && p.x < r.x+r.w && p.y > r.y && p.y < r.y+r.h
}

// distance is how far p is from r; zero inside it.
func distance(p point, r rect) float64 {
	dx := max(r.x-p.x, 0, p.x-(r.x+r.w))
	dy := max(r.y-p.y, 0, p.y-(r.y+r.h))
	return math.Hypot(dx, dy)
}

// The check finds each way a drawing can hide something.
func TestOverlapsFindsWhatHides(t *testing.T) {
	g := &graph.Graph{Name: "x", States: []graph.StateSpec{
		{Name: "A", Initial: true, Exits: []graph.State{"C"}},
		{Name: "B", Exits: []graph.State{"C"}},
		{Name: "C", Final: true},
	}}
	boxes := []*box{
		{spec: g.States[0], rect: rect{0, 0, 100, 50}},
		{spec: g.States[1], rect: rect{90, 40, 100, 50}},
		{spec: g.States[2], rect: rect{0, 200, 100, 50}},
	}
	// A to C passes through B's box on its way down; B to C does not.
	through := []point{{50, 50}, {50, 80}, {250, 60}, {50, 200}}
	clear := []point{{190, 65}, {250, 65}, {250, 225}, {100, 225}}
	d := &drawing{graph: g, boxes: boxes, width: 300, height: 300, edges: []*edgeShape{
		{edge: g.Edges()[0], index: 0, from: boxes[0], to: boxes[2], path: through, text: rect{60, 120, 40, 20}},
		{edge: g.Edges()[1], index: 1, from: boxes[1], to: boxes[2], path: clear, text: rect{80, 130, 40, 20}},
	}}
	want := []string{
		"boxes A and B overlap",
		"edge A → C (exit) passes through box B",
		"edge A → C (exit)'s text overlaps edge B → C (exit)'s text",
	}
	got := strings.Join(overlaps(d), "\n")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("the check does not report %q; it reports:\n%s", w, got)
		}
	}
	if strings.Contains(got, "B → C (exit) passes") {
		t.Errorf("the check reports an edge that passes no box:\n%s", got)
	}
}

// A machine of 50 states, drawn whole in a 1,400 × 700 window, shows its
// states' names at 9px or more.
func TestTheFleetGraphIsReadableOnAScreen(t *testing.T) {
	d, err := layoutAfresh(fleetGraph())
	if err != nil {
		t.Fatal(err)
	}
	scale := min(1400/d.width, 700/d.height)
	t.Logf("%s in %d bands: %.0f × %.0f px, drawn at %.3f of its size in 1400 × 700", d.rankdir, d.bands, d.width, d.height, scale)
	if px := nameFont * scale; px < 9 {
		t.Errorf("the names are drawn %.1fpx high in 1400 × 700, want at least 9", px)
	}
}

// BenchmarkLayout lays out the 50-state machine: first as for a
// dashboard's first graph, with Graphviz started anew (its WebAssembly is
// compiled before, when the package is initialised); later with Graphviz
// running; and again for a graph laid out before, as the page's requests
// find it.
func BenchmarkLayout(b *testing.B) {
	g := fleetGraph()
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			dot.Lock()
			if dot.gv != nil {
				if err := dot.gv.Close(); err != nil {
					b.Fatal(err)
				}
				dot.gv = nil
			}
			dot.Unlock()
			if _, err := layoutAfresh(g); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("later", func(b *testing.B) {
		for b.Loop() {
			if _, err := layoutAfresh(g); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, err := drawingOf(g); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A graph that fails validation is drawn all the same, as far as it goes:
// an edge to a state the graph lacks is left out.
func TestDrawingOfGraphsThatFailValidation(t *testing.T) {
	graphs := map[string]*graph.Graph{
		"Empty":        {Name: "x"},
		"NoInitial":    {Name: "x", States: []graph.StateSpec{{Name: "A", Exits: []graph.State{"B"}}, {Name: "B"}}},
		"MissingState": {Name: "x", States: []graph.StateSpec{{Name: "A", Initial: true, Exits: []graph.State{"Gone", "A"}}}},
	}
	for name, g := range graphs {
		t.Run(name, func(t *testing.T) {
			svg := draw(t, g.Name, g)
			if err := wellFormed(svg); err != nil {
				t.Errorf("the drawing is not well-formed XML: %v\n%s", err, svg)
			}
			if got := strings.Count(svg, `<a class="state`); got != len(g.States) {
				t.Errorf("the drawing has %d boxes for %d states", got, len(g.States))
			}
		})
	}
}
