package dashboard

import (
	"strings"
	"testing"

	"github.com/kfsm/kfsm/graph"
)

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
