package dashboard

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/kfsm/kfsm/graph"
)

// The graph is drawn in layers, left to right: breadth-first from the
// initial state, and below them, in a band of their own, the states that
// only deletion reaches, breadth-first from where deletion starts. A layer
// is a column of boxes. An edge to the next layer is a straight arrow with
// its label above and its count below; an edge within a layer bulges out
// to the right of the column. Any other edge is an arc over the boxes
// between its ends when both ends are in the top row, and under them
// otherwise; arcs on one side take separate tracks wherever they overlap,
// so that their one-line labels stay apart.
const (
	boxMinWidth = 140
	boxHeight   = 66
	charWidth   = 9 // of a state's name, in the box's bold 15px font
	gapX        = 100
	gapY        = 58
	marginLeft  = 92 // room for the start dot and the "on delete" label
	margin      = 16
	parallel    = 18 // between straight edges that join the same two states
	firstTrack  = 30 // from the boxes to the nearest arc
	track       = 22 // between arcs
)

// placed is a state's box.
type placed struct {
	spec             graph.StateSpec
	band, layer, row int
	x, y, w, h       float64
	deletion         bool
}

func (p *placed) cx() float64 { return p.x + p.w/2 }

// column is a layer in a band.
type column struct{ band, layer int }

// layers assigns each state a band, a layer and a row in it.
func layers(g *graph.Graph) (map[graph.State]*placed, map[column]int) {
	next := map[graph.State][]graph.State{}
	for _, e := range g.Edges() {
		next[e.From] = append(next[e.From], e.To)
	}
	out := map[graph.State]*placed{}
	rows := map[column]int{}
	place := func(s graph.State, band, layer int) {
		spec, _ := g.Lookup(s)
		c := column{band, layer}
		out[s] = &placed{spec: spec, band: band, layer: layer, row: rows[c]}
		rows[c]++
	}
	bfs := func(start graph.State, band int) {
		if start == "" || out[start] != nil {
			return
		}
		place(start, band, 0)
		queue := []graph.State{start}
		for len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			for _, to := range next[s] {
				if _, ok := g.Lookup(to); ok && out[to] == nil {
					place(to, band, out[s].layer+1)
					queue = append(queue, to)
				}
			}
		}
	}
	bfs(g.Initial(), 0)
	bfs(g.OnDelete(), 1)
	for _, s := range g.States {
		bfs(s.Name, 1) // unreachable, in a graph that failed validation
	}
	return out, rows
}

// drawing is a machine's graph laid out.
type drawing struct {
	machine string
	id      string // unique in the page, for the arrowhead's marker
	graph   *graph.Graph
	boxes   map[graph.State]*placed
	rows    map[column]int
	right   map[int]float64  // of each layer's widest box
	edges   []*edgePlan      // as graph.Edges lists them
	arcsOn  map[*placed]bool // boxes that arcs meet on their top

	minX, minY, maxX, maxY float64
}

// edgePlan is how one edge is drawn.
type edgePlan struct {
	edge  graph.Edge
	index int // in graph.Edges, which the counts use
	a, b  *placed
	shape shape
	// For straight edges, the k-th of n between the same two states.
	k, n int
	// For arcs, the track; for over and under arcs, the ends' x on the
	// boxes' sides.
	track  int
	ax, bx float64
}

type shape int

const (
	straight shape = iota
	over
	under
	side
	loop
)

func layout(machine, id string, g *graph.Graph) *drawing {
	boxes, rows := layers(g)
	d := &drawing{machine: machine, id: id, graph: g, boxes: boxes, rows: rows, right: map[int]float64{}}
	deletion := map[graph.State]bool{}
	for _, s := range g.DeletionPath() {
		deletion[s] = true
	}
	widths := map[int]float64{}
	layersN := 0
	for _, s := range g.States {
		p := d.boxes[s.Name]
		p.deletion = deletion[s.Name]
		p.w = math.Max(boxMinWidth, float64(charWidth*len([]rune(string(s.Name)))+32))
		p.h = boxHeight
		widths[p.layer] = math.Max(widths[p.layer], p.w)
		layersN = max(layersN, p.layer+1)
	}
	xs := map[int]float64{}
	x := float64(marginLeft)
	for l := range layersN {
		xs[l] = x
		d.right[l] = x + widths[l]
		x += widths[l] + gapX
	}
	underTracks := d.plan()
	// The deletion band starts below the main band and the arcs under it.
	bandRows := map[int]int{}
	for c, n := range rows {
		bandRows[c.band] = max(bandRows[c.band], n)
	}
	bandTop := map[int]float64{0: margin}
	bandTop[1] = margin + float64(bandRows[0])*(boxHeight+gapY)
	if underTracks > 0 {
		bandTop[1] += firstTrack + float64(underTracks)*track
	}
	for _, p := range d.boxes {
		p.x = xs[p.layer] + (widths[p.layer]-p.w)/2
		p.y = bandTop[p.band] + float64(p.row)*(boxHeight+gapY)
		d.grow(p.x+p.w+margin, p.y+p.h+margin)
	}
	d.attach()
	return d
}

// plan chooses each edge's shape and the arcs' tracks, and returns how
// many tracks the arcs under the main band take.
func (d *drawing) plan() int {
	pairs := map[[2]graph.State]int{}
	for _, e := range d.graph.Edges() {
		pairs[[2]graph.State{e.From, e.To}]++
	}
	seen := map[[2]graph.State]int{}
	var arcs, sides []*edgePlan
	for i, e := range d.graph.Edges() {
		a, b := d.boxes[e.From], d.boxes[e.To]
		if a == nil || b == nil {
			continue
		}
		pair := [2]graph.State{e.From, e.To}
		p := &edgePlan{edge: e, index: i, a: a, b: b, k: seen[pair], n: pairs[pair]}
		seen[pair]++
		d.edges = append(d.edges, p)
		switch {
		case a == b:
			p.shape = loop
		case a.band == b.band && b.layer == a.layer+1:
			p.shape = straight
		case a.band == b.band && a.layer == b.layer:
			p.shape = side
			sides = append(sides, p)
		case a.band == 0 && b.band == 0 && a.row == 0 && b.row == 0:
			p.shape = over
			arcs = append(arcs, p)
		default:
			p.shape = under
			arcs = append(arcs, p)
		}
	}
	// Short arcs take the inner tracks; an arc takes the first track on
	// its side where it overlaps no other.
	slices.SortStableFunc(arcs, func(p, q *edgePlan) int { return p.span() - q.span() })
	type key struct {
		shape shape
		band  int
	}
	taken := map[key][][][2]int{}
	for _, p := range arcs {
		lo, hi := p.layers()
		k := key{p.shape, max(p.a.band, p.b.band)}
		tracks := taken[k]
		for p.track = 0; p.track < len(tracks); p.track++ {
			if !slices.ContainsFunc(tracks[p.track], func(r [2]int) bool { return lo <= r[1] && r[0] <= hi }) {
				break
			}
		}
		if p.track == len(tracks) {
			tracks = append(tracks, nil)
		}
		tracks[p.track] = append(tracks[p.track], [2]int{lo, hi})
		taken[k] = tracks
	}
	// Edges within a column bulge further the more rows they span.
	slices.SortStableFunc(sides, func(p, q *edgePlan) int { return abs(p.a.row-p.b.row) - abs(q.a.row-q.b.row) })
	inColumn := map[column]int{}
	for _, p := range sides {
		c := column{p.a.band, p.a.layer}
		p.track = inColumn[c]
		inColumn[c]++
	}
	return len(taken[key{under, 0}])
}

func abs(n int) int { return max(n, -n) }

// attach shares out the top or bottom side of each box among the arcs
// that meet it there, ordered by where their other end is, so that they do
// not cross there.
func (d *drawing) attach() {
	type end struct {
		p     *edgePlan
		from  bool
		other float64
	}
	sides := map[*placed]map[shape][]end{}
	add := func(box *placed, s shape, e end) {
		if sides[box] == nil {
			sides[box] = map[shape][]end{}
		}
		sides[box][s] = append(sides[box][s], e)
	}
	d.arcsOn = map[*placed]bool{}
	for _, p := range d.edges {
		if p.shape != over && p.shape != under {
			continue
		}
		if p.shape == over {
			d.arcsOn[p.a], d.arcsOn[p.b] = true, true
		}
		add(p.a, p.shape, end{p: p, from: true, other: p.b.cx()})
		add(p.b, p.shape, end{p: p, other: p.a.cx()})
	}
	for box, byShape := range sides {
		for _, ends := range byShape {
			slices.SortStableFunc(ends, func(e, f end) int {
				if c := cmpFloat(e.other, f.other); c != 0 {
					return c
				}
				return e.p.track - f.p.track
			})
			for i, e := range ends {
				x := box.x + box.w*float64(i+1)/float64(len(ends)+1)
				if e.from {
					e.p.ax = x
				} else {
					e.p.bx = x
				}
			}
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// layers is the range of layers an arc spans.
func (p *edgePlan) layers() (int, int) {
	return min(p.a.layer, p.b.layer), max(p.a.layer, p.b.layer)
}

func (p *edgePlan) span() int {
	lo, hi := p.layers()
	return hi - lo
}

func (d *drawing) grow(x, y float64) {
	d.minX, d.maxX = math.Min(d.minX, x), math.Max(d.maxX, x)
	d.minY, d.maxY = math.Min(d.minY, y), math.Max(d.maxY, y)
}

// route is an edge's path and where its text goes: for straight edges a
// label above and the count below, for the others one line.
type route struct {
	path         string
	textX, textY float64
	oneLine      bool
	anchorStart  bool
}

func (d *drawing) route(p *edgePlan) route {
	a, b := p.a, p.b
	switch p.shape {
	case loop:
		// On the top right corner, or the bottom right one where arcs
		// run over the box.
		lift, dir := 34+float64(p.k)*track, -1.0
		x0, y0 := a.x+a.w-30, a.y
		x1, y1 := a.x+a.w, a.y+24
		textY := y0 - lift*0.75 - 4
		if d.arcsOn[a] {
			dir, y0, y1 = 1, a.y+a.h, a.y+a.h-24
			textY = y0 + lift*0.75 + 14
		}
		d.grow(x1+lift, y0+dir*lift)
		d.grow(x1+lift, textY+dir*14)
		return route{
			path:  fmt.Sprintf("M%s,%s C%s,%s %s,%s %s,%s", f(x0), f(y0), f(x0), f(y0+dir*lift), f(x1+lift), f(y1), f(x1+2), f(y1)),
			textX: x1 + lift*0.2, textY: textY, oneLine: true,
		}
	case straight:
		offset := (float64(p.k) - float64(p.n-1)/2) * parallel
		x0, y0 := a.x+a.w, a.y+a.h/2+offset
		x1, y1 := b.x, b.y+b.h/2+offset
		return route{path: fmt.Sprintf("M%s,%s L%s,%s", f(x0), f(y0), f(x1-2), f(y1)),
			textX: (x0 + x1) / 2, textY: (y0 + y1) / 2}
	case side:
		// Out of the side that faces the other box, into the side that
		// faces back.
		y0, y1 := a.y+a.h*0.72, b.y+b.h*0.28
		if a.row > b.row {
			y0, y1 = a.y+a.h*0.28, b.y+b.h*0.72
		}
		right := d.right[a.layer]
		bulge := right + 30 + float64(p.track)*track
		midX := (a.x + a.w + 6*bulge + b.x + b.w) / 8
		d.grow(bulge, y0)
		d.grow(midX+110, y1)
		return route{
			path:  fmt.Sprintf("M%s,%s C%s,%s %s,%s %s,%s", f(a.x+a.w), f(y0), f(bulge), f(y0), f(bulge), f(y1), f(b.x+b.w+2), f(y1)),
			textX: midX + 6, textY: (y0+y1)/2 + 4, oneLine: true, anchorStart: true,
		}
	}
	lo, hi := p.layers()
	band := max(a.band, b.band)
	var edge float64 // the top or bottom of the boxes the arc passes
	first := true
	for _, box := range d.boxes {
		if box.layer < lo || box.layer > hi || box.band != band {
			continue
		}
		switch {
		case first:
			edge = box.y
			if p.shape == under {
				edge = box.y + box.h
			}
			first = false
		case p.shape == over:
			edge = math.Min(edge, box.y)
		default:
			edge = math.Max(edge, box.y+box.h)
		}
	}
	dist := float64(firstTrack + p.track*track)
	y0, y1, peak, textY := a.y, b.y-2, edge-dist, edge-dist-6
	if p.shape == under {
		y0, y1, peak, textY = a.y+a.h, b.y+b.h+2, edge+dist, edge+dist+16
	}
	// Control points at c put the middle of the curve at the peak.
	c := (8*peak - y0 - y1) / 6
	d.grow(p.ax, peak)
	d.grow(p.ax, textY+6)
	d.grow(p.ax, textY-14)
	return route{
		path:  fmt.Sprintf("M%s,%s C%s,%s %s,%s %s,%s", f(p.ax), f(y0), f(p.ax), f(c), f(p.bx), f(c), f(p.bx), f(y1)),
		textX: (p.ax + p.bx) / 2, textY: textY, oneLine: true,
	}
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
func (d *drawing) svg() string {
	g := d.graph
	exits := map[graph.State]int{}
	for _, e := range g.Edges() {
		if e.Kind == graph.Exit {
			exits[e.From]++
		}
	}
	var edges strings.Builder
	for _, p := range d.edges {
		e := p.edge
		r := d.route(p)
		label := edgeLabel(e, exits[e.From])
		kind := e.Kind.String()
		what := kind
		if label != "" {
			what += ", " + label
		}
		count := fmt.Sprintf(`<tspan class="edge-count" data-live="%s">0×</tspan>`, live("edge", d.machine, strconv.Itoa(p.index)))
		fmt.Fprintf(&edges, `<g class="edge edge-%s">`, kind)
		fmt.Fprintf(&edges, `<title>%s → %s (%s): transitions in the window</title>`, esc(string(e.From)), esc(string(e.To)), esc(what))
		fmt.Fprintf(&edges, `<path d="%s" marker-end="url(#%s)"/>`, r.path, d.marker())
		class := "edge-text"
		if r.anchorStart {
			class += " start"
		}
		switch {
		case r.oneLine && label != "":
			fmt.Fprintf(&edges, `<text class="%s" x="%s" y="%s"><tspan class="edge-label">%s</tspan> %s</text>`, class, f(r.textX), f(r.textY), esc(label), count)
		case r.oneLine:
			fmt.Fprintf(&edges, `<text class="%s" x="%s" y="%s">%s</text>`, class, f(r.textX), f(r.textY), count)
		default:
			if label != "" {
				fmt.Fprintf(&edges, `<text class="edge-text" x="%s" y="%s"><tspan class="edge-label">%s</tspan></text>`, f(r.textX), f(r.textY-7), esc(label))
			}
			fmt.Fprintf(&edges, `<text class="edge-text" x="%s" y="%s">%s</text>`, f(r.textX), f(r.textY+16), count)
		}
		edges.WriteString("</g>\n")
	}
	var entries strings.Builder
	if p := d.boxes[g.Initial()]; p != nil {
		x, y := p.x, p.y+p.h/2
		fmt.Fprintf(&entries, `<g class="entry"><title>objects start in %s</title><circle cx="%s" cy="%s" r="6"/>`, esc(string(p.spec.Name)), f(x-64), f(y))
		fmt.Fprintf(&entries, `<path d="M%s,%s L%s,%s" marker-end="url(#%s)"/>`, f(x-58), f(y), f(x-2), f(y), d.marker())
		fmt.Fprintf(&entries, `<text class="edge-text" x="%s" y="%s"><tspan class="edge-count" data-live="%s">0×</tspan></text></g>`+"\n", f(x-32), f(y+17), live("edge", d.machine, "start"))
	}
	if p := d.boxes[g.OnDelete()]; p != nil {
		x, y := p.x, p.y+p.h/2
		fmt.Fprintf(&entries, `<g class="entry entry-delete"><title>on delete, objects move to %s from any state</title>`, esc(string(p.spec.Name)))
		fmt.Fprintf(&entries, `<text class="edge-text" x="%s" y="%s"><tspan class="edge-label">on delete</tspan></text>`, f(x-42), f(y-7))
		fmt.Fprintf(&entries, `<path d="M%s,%s L%s,%s" marker-end="url(#%s)"/>`, f(x-82), f(y), f(x-2), f(y), d.marker())
		fmt.Fprintf(&entries, `<text class="edge-text" x="%s" y="%s"><tspan class="edge-count" data-live="%s">0×</tspan></text></g>`+"\n", f(x-42), f(y+17), live("edge", d.machine, "delete"))
	}
	var boxes strings.Builder
	for _, s := range g.States {
		p := d.boxes[s.Name]
		classes, tag := []string{"state"}, ""
		switch {
		case s.Initial:
			classes, tag = append(classes, "initial"), "initial"
		case s.OnDelete:
			classes, tag = append(classes, "deletion"), "on delete"
		case p.deletion:
			classes, tag = append(classes, "deletion"), "deletion"
		}
		if s.Final {
			classes = append(classes, "final")
			tag = strings.TrimPrefix(tag+", final", ", ")
		}
		href := "#state/" + url.PathEscape(d.machine) + "/" + url.PathEscape(string(s.Name))
		fmt.Fprintf(&boxes, `<a class="%s" href="%s" data-machine="%s" data-state="%s">`, strings.Join(classes, " "), esc(href), esc(d.machine), esc(string(s.Name)))
		fmt.Fprintf(&boxes, `<rect x="%s" y="%s" width="%s" height="%s" rx="8"/>`, f(p.x), f(p.y), f(p.w), f(p.h))
		if s.Final {
			fmt.Fprintf(&boxes, `<rect class="inner" x="%s" y="%s" width="%s" height="%s" rx="5"/>`, f(p.x+4), f(p.y+4), f(p.w-8), f(p.h-8))
		}
		cx := p.cx()
		if tag != "" {
			fmt.Fprintf(&boxes, `<text class="tag" x="%s" y="%s">%s</text>`, f(cx), f(p.y+17), esc(tag))
		}
		fmt.Fprintf(&boxes, `<text class="name" x="%s" y="%s">%s</text>`, f(cx), f(p.y+37), esc(string(s.Name)))
		fmt.Fprintf(&boxes, `<text class="count" x="%s" y="%s"><tspan data-live="%s">0</tspan> <tspan data-live="%s">objects</tspan><tspan class="stalled" data-live="%s"></tspan></text>`,
			f(cx), f(p.y+56), live("objects", d.machine, string(s.Name)), live("noun", d.machine, string(s.Name)), live("stalled", d.machine, string(s.Name)))
		boxes.WriteString("</a>\n")
	}
	w, h := d.maxX-d.minX, d.maxY-d.minY
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="graph" xmlns="http://www.w3.org/2000/svg" viewBox="%s %s %s %s" width="%s" height="%s" role="group" aria-label="graph of machine %s">`+"\n",
		f(d.minX), f(d.minY), f(w), f(h), f(w), f(h), esc(d.machine))
	fmt.Fprintf(&b, `<defs><marker id="%s" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>`+"\n", d.marker())
	b.WriteString(entries.String())
	b.WriteString(edges.String())
	b.WriteString(boxes.String())
	b.WriteString("</svg>\n")
	return b.String()
}

func (d *drawing) marker() string { return d.id + "-arrow" }

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
