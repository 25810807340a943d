package dashboard

import (
	"fmt"
	"math"
	"slices"
)

// Spacing of the bands and of the tracks between them, in pixels.
const (
	bandGap   = 16.0 // between two bands, besides the gutter's tracks
	trackGap  = 8.0  // between two tracks
	trackPad  = 10.0 // between the bands' ends and the nearest track
	cornerMax = 8.0  // the radius of a track's corners
)

// layoutIn lays the graph out in the given bands (nil: one), left to
// right or top to bottom.
func (in *dotInput) layoutIn(rankdir string, bands []int) (*drawing, error) {
	k := 1
	if bands != nil {
		k = slices.Max(bands) + 1
	}
	w := &wrap{in: in, bands: bands, lr: rankdir == "LR"}
	for c := range k {
		part, err := runDot(in.source(rankdir, bands, c))
		if err != nil {
			return nil, err
		}
		if w.lr {
			part.transpose()
		}
		w.parts = append(w.parts, part)
	}
	d, err := w.drawing()
	if err != nil {
		return nil, err
	}
	d.rankdir, d.bands = rankdir, k
	d.move(func(p point) point { return point{p.x + margin, p.y + margin} })
	d.width += 2 * margin
	d.height += 2 * margin
	return d, nil
}

// ranks returns, for each state, its rank in d: the order of the boxes'
// centres along the ranks' direction.
func ranks(d *drawing, rankdir string) []int {
	var at []float64
	for _, b := range d.boxes {
		if rankdir == "LR" {
			at = append(at, math.Round(b.x+b.w/2))
		} else {
			at = append(at, math.Round(b.y+b.h/2))
		}
	}
	sorted := slices.Clone(at)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	ranks := make([]int, len(at))
	for i, x := range at {
		ranks[i], _ = slices.BinarySearch(sorted, x)
	}
	return ranks
}

// splitRanks assigns each state a band: the ranks are cut into k runs of
// about the same length, each cut where the fewest edges cross it. It
// returns nil when there are fewer than k ranks.
func (in *dotInput) splitRanks(k int) []int {
	if len(in.rank) == 0 {
		return nil
	}
	n := slices.Max(in.rank) + 1
	if n < k {
		return nil
	}
	// crossing[t] is the number of edges that a cut before rank t cuts.
	crossing := make([]int, n+1)
	for _, e := range in.edges {
		a, z := in.rank[in.byName[e.edge.From]], in.rank[in.byName[e.edge.To]]
		for t := min(a, z) + 1; t <= max(a, z); t++ {
			crossing[t]++
		}
	}
	slack := max(1, n/(4*k))
	cuts := []int{0}
	for j := 1; j < k; j++ {
		ideal := j * n / k
		best := -1
		for t := max(cuts[j-1]+1, ideal-slack); t <= min(n-(k-j), ideal+slack); t++ {
			if best < 0 || crossing[t] < crossing[best] || crossing[t] == crossing[best] && abs(t-ideal) < abs(best-ideal) {
				best = t
			}
		}
		if best < 0 {
			return nil
		}
		cuts = append(cuts, best)
	}
	bands := make([]int, len(in.rank))
	for i, r := range in.rank {
		after, _ := slices.BinarySearch(cuts, r+1)
		bands[i] = after - 1
	}
	return bands
}

func abs(n int) int { return max(n, -n) }

// wrap sets the bands, laid out top to bottom, side by side, and routes
// the edges between them; a graph laid out left to right is transposed
// before and after.
type wrap struct {
	in    *dotInput
	bands []int // nil: one band
	lr    bool
	parts []*laidOutBand
	left  []float64 // of each band
	top   float64   // of the bands, under the tracks over them
	// Gutter g lies between bands g-1 and g; gutterX[g] is its left side
	// and gutterW[g] its width.
	gutterX, gutterW []float64
}

func (w *wrap) band(state int) int {
	if w.bands == nil {
		return 0
	}
	return w.bands[state]
}

// crossing is an edge between two bands: out of its band's last rank at
// o, down to a track under the bands, along it to a track in a gutter, up
// that to a track over the bands, along it to over i, and down to the
// other band's first rank at i.
type crossing struct {
	e             *edgeShape
	from, to      int // bands
	o, i          point
	gutter        int
	x             float64 // of its track in the gutter
	under, over   int     // its tracks under and over the bands
	underY, overY float64
}

// drawing sets the bands and routes the edges between them.
func (w *wrap) drawing() (*drawing, error) {
	var crossings []*crossing
	tracks := make([]int, len(w.parts))
	for _, e := range w.in.edges {
		a, z := w.band(w.in.byName[e.edge.From]), w.band(w.in.byName[e.edge.To])
		if a != z {
			// Forward, it takes the gutter just before the band it
			// enters; back, the one just before the band it leaves.
			c := &crossing{e: e, from: a, to: z, gutter: max(a, z)}
			crossings = append(crossings, c)
			tracks[c.gutter]++
		}
	}
	w.place(tracks)
	height := 0.0
	for _, p := range w.parts {
		height = max(height, p.h)
	}
	for _, c := range crossings {
		o, ok1 := w.parts[c.from].nodes[fmt.Sprintf("o%d", c.e.index)]
		i, ok2 := w.parts[c.to].nodes[fmt.Sprintf("i%d", c.e.index)]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("edge %d: %w", c.e.index, errUnrouted)
		}
		c.o, c.i = point{o.x + w.left[c.from], o.y}, point{i.x + w.left[c.to], i.y}
	}
	w.assignGutterTracks(crossings)
	under := assignTracks(crossings, func(c *crossing) (float64, float64) { return c.o.x, c.x }, func(c *crossing, t int) { c.under = t })
	over := assignTracks(crossings, func(c *crossing) (float64, float64) { return c.x, c.i.x }, func(c *crossing, t int) { c.over = t })
	top := 0.0
	if over > 0 {
		top = trackPad + float64(over-1)*trackGap + trackPad/2
	}
	bottom := 0.0
	if under > 0 {
		bottom = trackPad + float64(under-1)*trackGap + trackPad/2
	}
	for _, c := range crossings {
		c.underY = top + height + trackPad + float64(c.under)*trackGap
		c.overY = top - trackPad - float64(c.over)*trackGap
	}
	w.top = top
	total := w.left[len(w.left)-1] + w.parts[len(w.parts)-1].w
	d := &drawing{graph: w.in.g, width: total, height: top + height + bottom}
	if err := w.fill(d, crossings); err != nil {
		return nil, err
	}
	if w.lr {
		d.move(func(p point) point { return point{p.y, p.x} })
		d.width, d.height = d.height, d.width
	}
	return d, nil
}

// place sets the bands side by side, with a gutter between each two wide
// enough for its tracks.
func (w *wrap) place(tracks []int) {
	k := len(w.parts)
	w.left = make([]float64, k)
	w.gutterX, w.gutterW = make([]float64, k), make([]float64, k)
	for c := 1; c < k; c++ {
		w.gutterX[c] = w.left[c-1] + w.parts[c-1].w
		w.gutterW[c] = bandGap + float64(tracks[c])*trackGap
		w.left[c] = w.gutterX[c] + w.gutterW[c]
	}
}

// assignGutterTracks gives each crossing a track in its gutter: in each,
// the crossings that come from further away take the tracks further from
// the band they come from, so that they cross fewer others.
func (w *wrap) assignGutterTracks(crossings []*crossing) {
	byGutter := map[int][]*crossing{}
	for _, c := range crossings {
		byGutter[c.gutter] = append(byGutter[c.gutter], c)
	}
	for g, cs := range byGutter {
		slices.SortStableFunc(cs, func(a, b *crossing) int { return cmpFloat(math.Abs(a.o.x-w.gutterX[g]), math.Abs(b.o.x-w.gutterX[g])) })
		n := float64(len(cs))
		first := w.gutterX[g] + (w.gutterW[g]-(n-1)*trackGap)/2
		for j, c := range cs {
			if c.from < c.to {
				c.x = first + float64(j)*trackGap
			} else {
				c.x = first + (n-1-float64(j))*trackGap
			}
		}
	}
}

// assignTracks gives each crossing a track for the span that span returns:
// the shortest spans the nearest tracks, and no two spans on one track
// overlap. It returns the number of tracks.
func assignTracks(crossings []*crossing, span func(*crossing) (float64, float64), set func(*crossing, int)) int {
	sorted := slices.Clone(crossings)
	length := func(c *crossing) float64 { a, b := span(c); return math.Abs(a - b) }
	slices.SortStableFunc(sorted, func(a, b *crossing) int { return cmpFloat(length(a), length(b)) })
	var taken [][][2]float64
	for _, c := range sorted {
		a, b := span(c)
		lo, hi := min(a, b)-trackGap, max(a, b)+trackGap
		t := 0
		for ; t < len(taken); t++ {
			if !slices.ContainsFunc(taken[t], func(r [2]float64) bool { return lo < r[1] && r[0] < hi }) {
				break
			}
		}
		if t == len(taken) {
			taken = append(taken, nil)
		}
		taken[t] = append(taken[t], [2]float64{lo, hi})
		set(c, t)
	}
	return len(taken)
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

// fill puts the boxes, edges and entries of the bands into d.
func (w *wrap) fill(d *drawing, crossings []*crossing) error {
	for i, b := range w.in.boxes {
		c := w.band(i)
		centre, ok := w.parts[c].nodes[fmt.Sprintf("s%d", i)]
		if !ok {
			return fmt.Errorf("dot placed no box for state %s", b.spec.Name)
		}
		nb := *b
		nb.rect = w.around(c, centre, b.rect)
		d.boxes = append(d.boxes, &nb)
	}
	routes := map[int]*crossing{}
	for _, c := range crossings {
		routes[c.e.index] = c
	}
	for _, e := range w.in.edges {
		a, z := w.in.byName[e.edge.From], w.in.byName[e.edge.To]
		c, id := w.band(a), fmt.Sprintf("e%d", e.index)
		ne := *e
		ne.from, ne.to = d.boxes[a], d.boxes[z]
		ne.text = w.around(c, w.parts[c].labels[id], e.text)
		p, err := w.path(c, id)
		if r := routes[e.index]; r != nil && err == nil {
			var in []point
			in, err = w.path(r.to, fmt.Sprintf("i%d", e.index))
			p = r.join(p, in, w.top)
		}
		if err != nil {
			return err
		}
		ne.path = p
		d.edges = append(d.edges, &ne)
	}
	for _, e := range w.in.entries {
		z := w.in.byName[e.to.spec.Name]
		c := w.band(z)
		ne := *e
		ne.to, ne.from = d.boxes[z], w.at(c, w.parts[c].nodes[e.key])
		ne.text = w.around(c, w.parts[c].labels[e.key], e.text)
		var err error
		if ne.path, err = w.path(c, e.key); err != nil {
			return err
		}
		d.entries = append(d.entries, &ne)
	}
	return nil
}

// at is where p of band c is in the drawing.
func (w *wrap) at(c int, p point) point { return point{p.x + w.left[c], p.y + w.top} }

// around is a rectangle of r's size centred on centre in band c; r's
// size is the drawing's, which w's is transposed from left to right.
func (w *wrap) around(c int, centre point, r rect) rect {
	if w.lr {
		r.w, r.h = r.h, r.w
	}
	p := w.at(c, centre)
	return rect{p.x - r.w/2, p.y - r.h/2, r.w, r.h}
}

// path is the path of the edge id in band c.
func (w *wrap) path(c int, id string) ([]point, error) {
	p, ok := w.parts[c].paths[id]
	if !ok {
		return nil, fmt.Errorf("edge %s: %w", id, errUnrouted)
	}
	out := make([]point, len(p))
	for i, q := range p {
		out[i] = w.at(c, q)
	}
	return out, nil
}

// join is the crossing's whole path: out, the route between the bands,
// and in, each moved down by top.
func (c *crossing) join(out, in []point, top float64) []point {
	shift := func(p point) point { return point{p.x, p.y + top} }
	route := []point{shift(c.o), {c.o.x, c.underY}, {c.x, c.underY}, {c.x, c.overY}, {c.i.x, c.overY}, shift(c.i)}
	p := slices.Clone(out)
	p = lineTo(p, route[0])
	p = roundedTo(p, route[1:])
	p = lineTo(p, in[0])
	return append(p, in[1:]...)
}

// lineTo adds a straight segment to q, unless the path is there.
func lineTo(p []point, q point) []point {
	a := p[len(p)-1]
	if math.Hypot(q.x-a.x, q.y-a.y) < 0.05 {
		return p
	}
	return append(p, point{a.x + (q.x-a.x)/3, a.y + (q.y-a.y)/3}, point{a.x + 2*(q.x-a.x)/3, a.y + 2*(q.y-a.y)/3}, q)
}

// roundedTo adds straight segments through the points, rounding the
// corners between them with quarter circles.
func roundedTo(p []point, through []point) []point {
	const k = 0.5523 // puts a cubic's control points on a quarter circle
	for j := 0; j+1 < len(through); j++ {
		a, corner, b := p[len(p)-1], through[j], through[j+1]
		in, out := math.Hypot(corner.x-a.x, corner.y-a.y), math.Hypot(b.x-corner.x, b.y-corner.y)
		r := min(cornerMax, in/2, out/2)
		if r < 0.5 {
			p = lineTo(p, corner)
			continue
		}
		s := point{corner.x - (corner.x-a.x)/in*r, corner.y - (corner.y-a.y)/in*r}
		e := point{corner.x + (b.x-corner.x)/out*r, corner.y + (b.y-corner.y)/out*r}
		p = lineTo(p, s)
		p = append(p, point{s.x + (corner.x-s.x)*k, s.y + (corner.y-s.y)*k}, point{e.x + (corner.x-e.x)*k, e.y + (corner.y-e.y)*k}, e)
	}
	return lineTo(p, through[len(through)-1])
}

// move moves everything in the drawing by f: a translation, or a
// reflection in the diagonal, which swaps its axes.
func (d *drawing) move(f func(point) point) {
	moveRect := func(r *rect) {
		a, b := f(point{r.x, r.y}), f(point{r.x + r.w, r.y + r.h})
		*r = rect{min(a.x, b.x), min(a.y, b.y), math.Abs(b.x - a.x), math.Abs(b.y - a.y)}
	}
	movePath := func(ps []point) {
		for i, p := range ps {
			ps[i] = f(p)
		}
	}
	for _, b := range d.boxes {
		moveRect(&b.rect)
	}
	for _, e := range d.edges {
		moveRect(&e.text)
		movePath(e.path)
	}
	for _, e := range d.entries {
		moveRect(&e.text)
		movePath(e.path)
		e.from = f(e.from)
	}
}
