package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/goccy/go-graphviz"

	"github.com/kfsm/kfsm/cmd/internal/dashboard/internal/graphvizcache"
)

// graphvizCache is why go-graphviz, which compiled Graphviz when it was
// initialised, before this package, keeps the code in memory only, or
// nil. Package graphvizcache pointed its cache at the user's own
// directory for that time; this sets TMPDIR back.
var graphvizCache = graphvizcache.Restore()

// source is band c of the graph in the DOT language; bands nil is the
// whole graph in one band. An edge that leaves the band ends at a point
// on the band's last rank, named o and the edge's index; one that enters
// it starts at a point on its first rank, named i and the index. Nodes
// are named by their index, so that no state's name needs quoting; the
// boxes and labels have fixed sizes, in inches, and show nothing.
func (in *dotInput) source(rankdir string, bands []int, c int) []byte {
	band := func(i int) int {
		if bands == nil {
			return 0
		}
		return bands[i]
	}
	var b bytes.Buffer
	b.WriteString("digraph {\n")
	fmt.Fprintf(&b, "graph [rankdir=%s, nodesep=0.1, ranksep=0.15, splines=true];\n", rankdir)
	b.WriteString("node [shape=box, fixedsize=true, label=\"\"];\n")
	b.WriteString("edge [arrowhead=none];\n")
	const port = "shape=point, width=0.01, style=invis"
	for _, e := range in.entries {
		if z := in.byName[e.to.spec.Name]; band(z) == c {
			shape := port
			if e.key == "start" {
				shape = "shape=circle, width=" + inches(startSize)
			}
			fmt.Fprintf(&b, "%s [%s];\n%s -> s%d [id=%s, label=%s];\n", e.key, shape, e.key, z, e.key, dotLabel(e.text))
		}
	}
	for i, bx := range in.boxes {
		if band(i) == c {
			fmt.Fprintf(&b, "s%d [width=%s, height=%s];\n", i, inches(bx.w), inches(bx.h))
		}
	}
	var outs, ins []string
	for _, e := range in.edges {
		a, z := in.byName[e.edge.From], in.byName[e.edge.To]
		switch {
		case band(a) == c && band(z) == c:
			fmt.Fprintf(&b, "s%d -> s%d [id=e%d, label=%s];\n", a, z, e.index, dotLabel(e.text))
		case band(a) == c:
			fmt.Fprintf(&b, "o%d [%s];\ns%d -> o%d [id=e%d, label=%s];\n", e.index, port, a, e.index, e.index, dotLabel(e.text))
			outs = append(outs, fmt.Sprintf("o%d", e.index))
		case band(z) == c:
			fmt.Fprintf(&b, "i%d [%s];\ni%d -> s%d [id=i%d];\n", e.index, port, e.index, z, e.index)
			ins = append(ins, fmt.Sprintf("i%d", e.index))
		}
	}
	if outs != nil {
		fmt.Fprintf(&b, "{rank=max; %s}\n", strings.Join(outs, "; "))
	}
	if ins != nil {
		fmt.Fprintf(&b, "{rank=min; %s}\n", strings.Join(ins, "; "))
	}
	b.WriteString("}\n")
	return b.Bytes()
}

func inches(px float64) string { return strconv.FormatFloat(px/72, 'f', 4, 64) }

// dotLabel is an empty label of r's size: a table of one fixed-size cell.
func dotLabel(r rect) string {
	return fmt.Sprintf(`<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="0"><TR><TD FIXEDSIZE="TRUE" WIDTH="%d" HEIGHT="%d"></TD></TR></TABLE>>`,
		int(math.Ceil(r.w)), int(math.Ceil(r.h)))
}

// laidOutBand is one band as dot laid it out, its y axis pointing down.
type laidOutBand struct {
	w, h   float64
	nodes  map[string]point   // centres, by node name
	paths  map[string][]point // Bézier points, by edge id
	labels map[string]point   // label centres, by edge id
}

// transpose swaps the band's axes, which turns a band laid out left to
// right into one laid out top to bottom.
func (l *laidOutBand) transpose() {
	l.w, l.h = l.h, l.w
	for k, p := range l.nodes {
		l.nodes[k] = point{p.y, p.x}
	}
	for k, p := range l.labels {
		l.labels[k] = point{p.y, p.x}
	}
	for _, ps := range l.paths {
		for i, p := range ps {
			ps[i] = point{p.y, p.x}
		}
	}
}

// dot is one Graphviz for the process: it runs in one WebAssembly
// instance, which is not safe for concurrent use.
var dot struct {
	sync.Mutex
	gv *graphviz.Graphviz
}

// errUnrouted is dot leaving an edge without a path, as it may where
// there is no room for one.
var errUnrouted = errors.New("dot routed no path")

// runDot lays out the graph in src.
func runDot(src []byte) (*laidOutBand, error) {
	dot.Lock()
	defer dot.Unlock()
	ctx := context.Background()
	if dot.gv == nil {
		gv, err := graphviz.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("starting graphviz: %w", err)
		}
		dot.gv = gv
	}
	g, err := graphviz.ParseBytes(src)
	if err != nil {
		return nil, fmt.Errorf("reading the graph: %w", err)
	}
	defer func() { _ = g.Close() }()
	var buf bytes.Buffer
	if err := dot.gv.Render(ctx, g, "json0", &buf); err != nil {
		return nil, fmt.Errorf("laying out the graph: %w", err)
	}
	return readDot(buf.Bytes())
}

// readDot reads dot's JSON output. Dot's y axis points up.
func readDot(data []byte) (*laidOutBand, error) {
	var out struct {
		BB      string `json:"bb"`
		Objects []struct {
			Name string `json:"name"`
			Pos  string `json:"pos"`
		} `json:"objects"`
		Edges []struct {
			ID  string `json:"id"`
			Pos string `json:"pos"`
			LP  string `json:"lp"`
		} `json:"edges"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("reading dot's layout: %w", err)
	}
	bb, err := parsePoints(out.BB)
	if err != nil {
		return nil, fmt.Errorf("dot's bounding box %q: %w", out.BB, err)
	}
	if len(bb) != 2 {
		return nil, fmt.Errorf("dot's bounding box %q has %d corners", out.BB, len(bb))
	}
	l := &laidOutBand{w: bb[1].x, h: bb[1].y, nodes: map[string]point{}, paths: map[string][]point{}, labels: map[string]point{}}
	flip := func(p point) point { return point{p.x, l.h - p.y} }
	for _, o := range out.Objects {
		if p, err := parsePoints(o.Pos); err == nil && len(p) == 1 {
			l.nodes[o.Name] = flip(p[0])
		}
	}
	for _, e := range out.Edges {
		if e.Pos == "" {
			return nil, fmt.Errorf("edge %s: %w", e.ID, errUnrouted)
		}
		p, err := parseSpline(e.Pos)
		if err != nil {
			return nil, fmt.Errorf("dot's edge %s: %w", e.ID, err)
		}
		for i := range p {
			p[i] = flip(p[i])
		}
		l.paths[e.ID] = p
		if lp, err := parsePoints(e.LP); err == nil && len(lp) == 1 {
			l.labels[e.ID] = flip(lp[0])
		}
	}
	return l, nil
}

// parsePoints reads "x,y x,y …", and a bounding box's "x0,y0,x1,y1".
func parsePoints(s string) ([]point, error) {
	var nums []float64
	for f := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, err
		}
		nums = append(nums, v)
	}
	if len(nums) == 0 || len(nums)%2 != 0 {
		return nil, fmt.Errorf("%d coordinates", len(nums))
	}
	var ps []point
	for i := 0; i < len(nums); i += 2 {
		ps = append(ps, point{nums[i], nums[i+1]})
	}
	return ps, nil
}

// parseSpline reads an edge's pos: its Bézier points, after any arrow
// ends ("s,x,y", "e,x,y"), which the drawing does not use.
func parseSpline(s string) ([]point, error) {
	var ps []point
	for _, f := range strings.Fields(s) {
		if strings.HasPrefix(f, "s,") || strings.HasPrefix(f, "e,") {
			continue
		}
		p, err := parsePoints(f)
		if err != nil || len(p) != 1 {
			return nil, fmt.Errorf("a spline point %q", f)
		}
		ps = append(ps, p[0])
	}
	if len(ps) < 4 || (len(ps)-1)%3 != 0 {
		return nil, fmt.Errorf("a spline of %d points", len(ps))
	}
	return ps, nil
}
