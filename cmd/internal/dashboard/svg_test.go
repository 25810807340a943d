package dashboard

import (
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/graph"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// testGraphs are drawn into golden files: a lifecycle with a cycle, a
// timeout and a deletion path; a pipeline whose edges skip layers; and a
// state with retries, a timeout to itself and several exits.
var testGraphs = map[string]*graph.Graph{
	"lifecycle": {Name: "moose", Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: "Tagged", Initial: true, Exits: []graph.State{"Roaming"}},
		{Name: "Roaming", Exits: []graph.State{"Eating"}, Timeout: &graph.Timeout{After: 30 * time.Minute, To: "Lost"}},
		{Name: "Eating", Exits: []graph.State{"Sleeping"}},
		{Name: "Sleeping", Exits: []graph.State{"Roaming"}},
		{Name: "Lost", Exits: []graph.State{"Roaming"}},
		{Name: "Released", OnDelete: true, Final: true},
	}},
	"pipeline": {Name: "webapp", Mode: graph.Pipeline, States: []graph.StateSpec{
		{Name: "Validate", Initial: true, Exits: []graph.State{"Config", "Failed"}},
		{Name: "Config", Exits: []graph.State{"Deploy"}},
		{Name: "Deploy", Exits: []graph.State{"Serving"}},
		{Name: "Serving", Final: true},
		{Name: "Failed", Final: true},
	}},
	"retries": {Name: "updater", Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: "Check", Initial: true, Exits: []graph.State{"Download", "Check"}, Retries: &graph.Retries{Limit: 3, To: "Broken"}},
		{Name: "Download", Exits: []graph.State{"Install"}, Timeout: &graph.Timeout{After: 90 * time.Second, To: "Check"}},
		{Name: "Install", Exits: []graph.State{"Check"}, Retries: &graph.Retries{Limit: 1, To: "Check"}},
		{Name: "Broken", Final: true},
		{Name: "Removing", OnDelete: true, Exits: []graph.State{"Gone"}},
		{Name: "Gone", Final: true},
	}},
}

func TestGraphDrawingsMatchGoldenFiles(t *testing.T) {
	for name, g := range testGraphs {
		t.Run(name, func(t *testing.T) {
			if err := g.Validate(); err != nil {
				t.Fatalf("the test graph is invalid: %v", err)
			}
			got := draw(t, g.Name, g)
			if err := wellFormed(got); err != nil {
				t.Fatalf("the drawing is not well-formed XML: %v\n%s", err, got)
			}
			path := filepath.Join("testdata", name+".svg")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("the drawing differs from %s (run with -update if the change is meant): -want +got:\n%s", path, diff)
			}
			if again := draw(t, g.Name, g); again != got {
				t.Error("two drawings of one graph differ")
			}
		})
	}
}

// Every state gets a box that links to its objects and shows their
// number, and every edge a count, each with a key the page updates.
func TestDrawingShowsEveryStateAndEdge(t *testing.T) {
	g := testGraphs["retries"]
	svg := draw(t, "updater", g)
	for _, s := range g.States {
		for _, want := range []string{
			`href="#state/updater/` + string(s.Name) + `"`,
			`>` + string(s.Name) + `</text>`,
			live("objects", "updater", string(s.Name)),
		} {
			if !strings.Contains(svg, want) {
				t.Errorf("the drawing lacks %s for state %s", want, s.Name)
			}
		}
	}
	for i := range g.Edges() {
		if want := live("edge", "updater", strconv.Itoa(i)); !strings.Contains(svg, want) {
			t.Errorf("the drawing has no count for edge %d (%+v)", i, g.Edges()[i])
		}
	}
	for _, want := range []string{"timeout 1m30s", "after 3 failures", "after 1 failure", "#1", "#2", "on delete", ">initial<", ">final<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the drawing lacks the label %q", want)
		}
	}
}

// Names are escaped: a state named like markup stays text.
func TestDrawingEscapesNames(t *testing.T) {
	g := &graph.Graph{Name: "x", States: []graph.StateSpec{
		{Name: `<b>"A"&`, Initial: true, Exits: []graph.State{"B"}},
		{Name: "B", Final: true},
	}}
	svg := draw(t, `m"<`, g)
	if strings.Contains(svg, `<b>`) || strings.Contains(svg, `m"<`) {
		t.Errorf("a name went into the drawing unescaped:\n%s", svg)
	}
	if err := wellFormed(svg); err != nil {
		t.Errorf("the drawing is not well-formed XML: %v", err)
	}
}

// draw lays g out afresh, not from the drawings kept, and draws it.
func draw(t testing.TB, machine string, g *graph.Graph) string {
	t.Helper()
	d, err := layoutAfresh(g)
	if err != nil {
		t.Fatalf("laying out %s: %v", machine, err)
	}
	return d.svg(machine, "m1")
}

func wellFormed(s string) error {
	dec := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
