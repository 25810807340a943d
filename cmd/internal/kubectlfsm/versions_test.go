package kubectlfsm

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

// describe draws an object that the operator has not yet migrated on its
// own version's graph, and says which version it is at; a current one on
// the machine's, with no such line.
func TestDescribeDrawsAnObjectOnItsOwnGraphVersion(t *testing.T) {
	two := &graph.Graph{Name: "webapp", Version: 2, Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: "Exposed", Initial: true, Exits: []graph.State{"Published"}},
		{Name: "Published", Final: true},
	}}
	one := &graph.Graph{Name: "webapp", Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: "Exposed", Initial: true, Exits: []graph.State{"Registered"}},
		{Name: "Registered", Final: true},
	}}
	m := &inspect.Machine{Graph: two, Earlier: map[int]*graph.Graph{1: one}, GVR: schema.GroupVersionResource{Resource: "webapps"}}
	cases := map[string]struct {
		version  int32
		state    fsm.State
		line     string // the Graph version line, or "" for none
		drawn    string // a state of the graph drawn
		notDrawn string // a state of the other
	}{
		"NotYetMigrated": {version: 0, state: "Registered", line: "Graph:      graph version 1, the machine's is 2: the operator migrates it when it next reads it", drawn: "Registered", notDrawn: "Published"},
		"Current":        {version: 2, state: "Published", drawn: "Published", notDrawn: "Registered"},
		"Newer":          {version: 3, state: "Listed", line: "Graph:      graph version 3, the machine's is 2: a newer operator wrote it, and this one leaves it alone", drawn: "Published", notDrawn: "Registered"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := inspect.Object{Name: "shop", Namespace: "web", Status: fsm.Status{State: tc.state, GraphVersion: tc.version}}
			var out bytes.Buffer
			writeDescribe(&out, m, o, details{}, time.Now())
			text := out.String()
			head, drawing, _ := strings.Cut(text, "\nGraph:\n")
			drawing, _, _ = strings.Cut(drawing, "\nHistory:")
			if got := strings.Contains(head, "graph version"); got != (tc.line != "") || tc.line != "" && !strings.Contains(head, tc.line) {
				t.Errorf("describe's head, want the line %q:\n%s", tc.line, head)
			}
			if !strings.Contains(drawing, tc.drawn) || strings.Contains(drawing, tc.notDrawn) {
				t.Errorf("describe draws, want %s and not %s:\n%s", tc.drawn, tc.notDrawn, drawing)
			}
		})
	}
}
