package dashboard

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"

	"github.com/kfsm/kfsm/graph"
)

// A graph is laid out by Graphviz's dot, with boxes and edge labels of the
// sizes the drawing needs: dot ranks the states, places the boxes, routes
// the edges as splines and puts each label beside its edge, and the
// drawing takes that geometry as it is.
//
// A machine with many ranks would make one long row, or column, that
// cannot be read once shrunk to fit a screen, so its ranks are folded into
// bands, as a newspaper folds text into columns: each band is laid out by
// dot on its own, and the bands are set side by side, in rank order. An
// edge between two bands leaves its band at the band's last rank and
// enters the other at its first; between them it runs in the margin past
// the bands' ends and in the gutter between two bands, on a track of its
// own. Left to right, the bands are stacked rows; top to bottom, they are
// columns. The drawing is the one, of either direction and any number of
// bands, that fits a wide screen at the largest scale.

// Sizes, in pixels.
const (
	nameFont     = 15.0 // a state's name, bold
	tagFont      = 11.0 // "initial", "deletion", "final": upper case, spaced
	tagSpacing   = 0.06 // em between the tag's letters
	countFont    = 13.0 // the objects in a state
	edgeFont     = 12.0 // an edge's label and count
	edgeLine     = 13.0 // between the lines of an edge's text
	edgeBaseline = 11.0 // from the top of an edge's text to its first baseline
	boxPadding   = 8.0  // between a box's text and its sides
	boxHeight    = 46.0 // with a name and a count
	tagHeight    = 12.0 // more, for a tag over the name
	finalInset   = 4.0  // of a final state's inner border
	margin       = 8.0  // around the drawing
	startSize    = 12.0 // the dot the arrow into the initial state starts at
	maxCount     = "99999×"
)

// The screen a drawing should fit, and the most bands to try.
const (
	screenWidth  = 1440.0
	screenHeight = 760.0
	maxBands     = 8
)

type point struct{ x, y float64 }

type rect struct{ x, y, w, h float64 }

// box is a state's box.
type box struct {
	spec     graph.StateSpec
	deletion bool // on the deletion path
	tag      string
	rect
}

// edgeShape is an edge drawn: a path of cubic Bézier segments, its first
// point and then three for each segment, and the rectangle its text
// takes.
type edgeShape struct {
	edge  graph.Edge
	index int // in graph.Edges, which the counts use
	from  *box
	to    *box
	label string // from edgeLabel; the count goes below it
	path  []point
	text  rect
}

// entry is an arrow into the graph: into the initial state from a dot, or
// into the deletion path from "on delete".
type entry struct {
	key   string // "start" or "delete", the count's data-live key
	label string
	from  point // the start dot's centre
	to    *box
	path  []point
	text  rect
}

// drawing is a machine's graph laid out. It does not depend on the
// machine's name, so one drawing serves every machine with the same graph.
type drawing struct {
	graph         *graph.Graph
	boxes         []*box // as graph.States lists them
	edges         []*edgeShape
	entries       []*entry
	width, height float64
	rankdir       string // LR or TB
	bands         int
}

// scale is the scale at which the drawing fits the screen, at most 1.
func (d *drawing) scale() float64 {
	return math.Min(1, math.Min(screenWidth/d.width, screenHeight/d.height))
}

// drawingOf lays out g, or returns the drawing made before of an equal
// graph, so that a graph is laid out once however often it is shown.
func drawingOf(g *graph.Graph) (*drawing, error) {
	key, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	laidOut.Lock()
	defer laidOut.Unlock()
	if d := laidOut.drawings[string(key)]; d != nil {
		return d, nil
	}
	d, err := layoutAfresh(g)
	if err != nil {
		return nil, err
	}
	if len(laidOut.drawings) >= 64 {
		clear(laidOut.drawings)
	}
	laidOut.drawings[string(key)] = d
	return d, nil
}

// laidOut keeps the drawings made, by graph.
var laidOut = struct {
	sync.Mutex
	drawings map[string]*drawing
}{drawings: map[string]*drawing{}}

// layoutAfresh lays out g in one band and then in more, left to right
// and top to bottom, and returns the drawing that fits the screen at the
// largest scale; of two that fit about as well, the one tried first.
func layoutAfresh(g *graph.Graph) (*drawing, error) {
	in := newDotInput(g)
	var best *drawing
	for _, rankdir := range []string{"LR", "TB"} {
		if best != nil && best.scale() >= 1 {
			break
		}
		one, err := in.layoutIn(rankdir, nil)
		if err != nil {
			return nil, err
		}
		if best == nil || one.scale() > best.scale()+0.005 {
			best = one
		}
		// More bands fit better until they are too many: stop once two
		// more in a row did not.
		in.rank = ranks(one, rankdir)
		fits, worse := one.scale(), 0
		for k := 2; k <= maxBands && best.scale() < 1 && worse < 2; k++ {
			bands := in.splitRanks(k)
			if bands == nil {
				break
			}
			d, err := in.layoutIn(rankdir, bands)
			if errors.Is(err, errUnrouted) {
				continue
			}
			if err != nil {
				return nil, err
			}
			worse++
			if d.scale() > fits {
				fits, worse = d.scale(), 0
			}
			if d.scale() > best.scale()+0.005 {
				best = d
			}
		}
	}
	return best, nil
}

// dotInput is a graph as dot gets it: the sizes of its boxes and texts,
// and, once laid out in one band, its states' ranks.
type dotInput struct {
	g       *graph.Graph
	boxes   []*box
	byName  map[graph.State]int
	edges   []*edgeShape
	entries []*entry
	rank    []int
}

func newDotInput(g *graph.Graph) *dotInput {
	in := &dotInput{g: g, byName: map[graph.State]int{}}
	deletion := map[graph.State]bool{}
	for _, s := range g.DeletionPath() {
		deletion[s] = true
	}
	for i, s := range g.States {
		b := &box{spec: s, deletion: deletion[s.Name], tag: stateTag(s, deletion[s.Name])}
		padding := boxPadding
		if s.Final {
			padding += finalInset
		}
		b.w = math.Ceil(max(
			textWidth(string(s.Name), nameFont, true),
			textWidth("9999 objects", countFont, true),
			tagWidth(b.tag),
		) + 2*padding)
		b.h = boxHeight
		if b.tag != "" {
			b.h += tagHeight
		}
		in.boxes = append(in.boxes, b)
		in.byName[s.Name] = i
	}
	exits := map[graph.State]int{}
	for _, e := range g.Edges() {
		if e.Kind == graph.Exit {
			exits[e.From]++
		}
	}
	for i, e := range g.Edges() {
		a, okA := in.byName[e.From]
		z, okZ := in.byName[e.To]
		if !okA || !okZ {
			continue
		}
		label := edgeLabel(e, exits[e.From])
		in.edges = append(in.edges, &edgeShape{edge: e, index: i, from: in.boxes[a], to: in.boxes[z], label: label, text: textRect(label)})
	}
	if i, ok := in.byName[g.Initial()]; ok {
		in.entries = append(in.entries, &entry{key: "start", to: in.boxes[i], text: textRect("")})
	}
	if i, ok := in.byName[g.OnDelete()]; ok {
		in.entries = append(in.entries, &entry{key: "delete", label: "on delete", to: in.boxes[i], text: textRect("on delete")})
	}
	return in
}

// stateTag is the small text over a state's name.
func stateTag(s graph.StateSpec, deletion bool) string {
	var tag string
	switch {
	case s.Initial:
		tag = "initial"
	case s.OnDelete:
		tag = "on delete"
	case deletion:
		tag = "deletion"
	}
	if s.Final {
		tag = strings.TrimPrefix(tag+", final", ", ")
	}
	return tag
}

// tagWidth is the width of a tag as the page draws it: in upper case,
// spaced.
func tagWidth(tag string) float64 {
	return textWidth(strings.ToUpper(tag), tagFont, false) + tagSpacing*tagFont*float64(len([]rune(tag)))
}

// textRect is the size of an edge's text: its label, if any, over a count
// of up to maxCount.
func textRect(label string) rect {
	w := textWidth(maxCount, edgeFont, true)
	lines := 1.0
	if label != "" {
		w = max(w, textWidth(label, edgeFont, false))
		lines = 2
	}
	return rect{w: math.Ceil(w + 4), h: math.Ceil(lines*edgeLine + 3)}
}
