package dashboard

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"net/url"
	"strconv"
	"strings"

	"github.com/kfsm/kfsm/graph"
)

// graphView is a machine's graph as one page shows it.
type graphView struct {
	machine, id string // id is unique in the page
	drawing     *drawing
	err         error // why the graph could not be laid out
}

// layout is the machine's graph laid out for a page: the drawing made
// before of an equal graph, or a new one.
func layout(machine, id string, g *graph.Graph) graphView {
	d, err := drawingOf(g)
	return graphView{machine: machine, id: id, drawing: d, err: err}
}

// svg draws the graph or, where it could not be laid out, says why.
func (v graphView) svg() string {
	if v.err != nil {
		return fmt.Sprintf(`<p class="error">The graph of machine %s cannot be drawn: %s</p>`+"\n", esc(v.machine), esc(v.err.Error()))
	}
	return v.drawing.svg(v.machine, v.id)
}

// edgeLabel is the text drawn on an edge: its timeout or retries, or its
// priority where a state has several exits.
func edgeLabel(e graph.Edge, exits int) string {
	switch e.Kind {
	case graph.TimeoutExit:
		return "timeout " + shortDuration(e.After)
	case graph.RetriesExit:
		if e.Limit == 1 {
			return "after 1 failure"
		}
		return fmt.Sprintf("after %d failures", e.Limit)
	}
	if exits > 1 {
		return fmt.Sprintf("#%d", e.Priority)
	}
	return ""
}

// svg draws the machine's graph. The counts it shows are zero; the page
// fills them in, and keeps them live, through the elements' data-live
// keys.
func (d *drawing) svg(machine, id string) string {
	marker := id + "-arrow"
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %s %s" width="%s" height="%s" role="group" aria-label="graph of machine %s">`+"\n",
		f(d.width), f(d.height), f(d.width), f(d.height), esc(machine))
	fmt.Fprintf(&b, `<defs><marker id="%s" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>`+"\n", marker)
	for _, e := range d.entries {
		drawEntry(&b, e, machine, marker)
	}
	for _, e := range d.edges {
		drawEdge(&b, e, machine, marker)
	}
	for _, x := range d.boxes {
		drawBox(&b, x, machine)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// drawEntry draws the arrow into the initial state, from a dot, or into
// the deletion path, from "on delete".
func drawEntry(b *strings.Builder, e *entry, machine, marker string) {
	name := esc(string(e.to.spec.Name))
	if e.key == "start" {
		fmt.Fprintf(b, `<g class="entry"><title>objects start in %s</title><circle cx="%s" cy="%s" r="%s"/>`, name, f(e.from.x), f(e.from.y), f(startSize/2))
	} else {
		fmt.Fprintf(b, `<g class="entry entry-delete"><title>on delete, objects move to %s from any state</title>`, name)
	}
	fmt.Fprintf(b, `<path d="%s" marker-end="url(#%s)"/>`, pathData(e.path), marker)
	writeText(b, e.text, e.label, live("edge", machine, e.key))
	b.WriteString("</g>\n")
}

func drawEdge(b *strings.Builder, e *edgeShape, machine, marker string) {
	kind := e.edge.Kind.String()
	what := kind
	if e.label != "" {
		what += ", " + e.label
	}
	fmt.Fprintf(b, `<g class="edge edge-%s">`, kind)
	fmt.Fprintf(b, `<title>%s → %s (%s): transitions in the window</title>`, esc(string(e.edge.From)), esc(string(e.edge.To)), esc(what))
	fmt.Fprintf(b, `<path d="%s" marker-end="url(#%s)"/>`, pathData(e.path), marker)
	writeText(b, e.text, e.label, live("edge", machine, strconv.Itoa(e.index)))
	b.WriteString("</g>\n")
}

// writeText writes an edge's text in r: the label, if any, over the
// count, which starts at zero.
func writeText(b *strings.Builder, r rect, label, key string) {
	cx, y := r.x+r.w/2, r.y+2+edgeBaseline
	fmt.Fprintf(b, `<text class="edge-text" x="%s" y="%s">`, f(cx), f(y))
	dy := ""
	if label != "" {
		fmt.Fprintf(b, `<tspan class="edge-label">%s</tspan>`, esc(label))
		dy = fmt.Sprintf(` x="%s" dy="%s"`, f(cx), f(edgeLine))
	}
	fmt.Fprintf(b, `<tspan class="edge-count"%s data-live="%s">0×</tspan></text>`, dy, key)
}

func drawBox(b *strings.Builder, x *box, machine string) {
	s := x.spec
	classes := []string{"state"}
	switch {
	case s.Initial:
		classes = append(classes, "initial")
	case x.deletion:
		classes = append(classes, "deletion")
	}
	if s.Final {
		classes = append(classes, "final")
	}
	href := "#state/" + url.PathEscape(machine) + "/" + url.PathEscape(string(s.Name))
	fmt.Fprintf(b, `<a class="%s" href="%s" data-machine="%s" data-state="%s">`, strings.Join(classes, " "), esc(href), esc(machine), esc(string(s.Name)))
	fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" rx="8"/>`, f(x.x), f(x.y), f(x.w), f(x.h))
	if s.Final {
		fmt.Fprintf(b, `<rect class="inner" x="%s" y="%s" width="%s" height="%s" rx="5"/>`, f(x.x+finalInset), f(x.y+finalInset), f(x.w-2*finalInset), f(x.h-2*finalInset))
	}
	cx, top := x.x+x.w/2, x.y
	if x.tag != "" {
		fmt.Fprintf(b, `<text class="tag" x="%s" y="%s">%s</text>`, f(cx), f(top+15), esc(x.tag))
		top += tagHeight
	}
	fmt.Fprintf(b, `<text class="name" x="%s" y="%s">%s</text>`, f(cx), f(top+21), esc(string(s.Name)))
	fmt.Fprintf(b, `<text class="count" x="%s" y="%s"><tspan data-live="%s">0</tspan><tspan data-live="%s"> objects</tspan><tspan class="stalled" data-live="%s"></tspan></text>`,
		f(cx), f(top+38), live("objects", machine, string(s.Name)), live("noun", machine, string(s.Name)), live("stalled", machine, string(s.Name)))
	b.WriteString("</a>\n")
}

// pathData is a path of cubic Bézier segments in SVG's path syntax.
func pathData(p []point) string {
	var b strings.Builder
	fmt.Fprintf(&b, "M%s,%s", f(p[0].x), f(p[0].y))
	for i := 1; i+2 < len(p); i += 3 {
		fmt.Fprintf(&b, " C%s,%s %s,%s %s,%s", f(p[i].x), f(p[i].y), f(p[i+1].x), f(p[i+1].y), f(p[i+2].x), f(p[i+2].y))
	}
	return b.String()
}

// live is liveKey escaped for an attribute.
func live(kind, machine, key string) string { return esc(liveKey(kind, machine, key)) }

// liveKey is the key by which the page finds an element to update: a
// JSON array, so that no name needs escaping rules of its own.
func liveKey(kind, machine, key string) string {
	data, _ := json.Marshal([]string{kind, machine, key})
	return string(data)
}

func esc(s string) string { return html.EscapeString(s) }

// f writes a coordinate with at most one decimal.
func f(v float64) string {
	v = math.Round(v*10) / 10
	if v == math.Trunc(v) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
