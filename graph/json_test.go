package graph

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// withoutStalls returns a copy of g without its Retries that have no To:
// JSON draws no edge for them, so they cannot come back.
func withoutStalls(g *Graph) *Graph {
	out := *g
	out.States = append([]StateSpec(nil), g.States...)
	for i, s := range out.States {
		if s.Retries != nil && s.Retries.To == "" {
			out.States[i].Retries = nil
		}
	}
	return &out
}

func TestParseJSONReadsBackWhatJSONWrote(t *testing.T) {
	cases := map[string]struct {
		reason string
		graph  *Graph
	}{
		"Moose": {
			reason: "priorities, a timeout, retries and a deletion path come back",
			graph:  moose(),
		},
		"Webapp": {
			reason: "the pipeline mode comes back",
			graph:  webapp(),
		},
		"Job": {
			reason: "the graph of ExampleGraph_Mermaid comes back",
			graph: &Graph{Name: "job", Mode: Pipeline, States: []StateSpec{
				{Name: "Queued", Initial: true, Exits: []State{"Running"}},
				{Name: "Running", Exits: []State{"Done"}, Timeout: &Timeout{After: time.Hour, To: "TimedOut"}},
				{Name: "Done", Final: true},
				{Name: "TimedOut", Final: true},
			}},
		},
		"InvalidDoor": {
			reason: "an invalid graph, such as the one of ExampleGraph_Validate, is exported and read back as it is",
			graph: &Graph{Name: "door", States: []StateSpec{
				{Name: "Closed", Initial: true, Exits: []State{"Open", "Locked"}},
				{Name: "Open", Exits: []State{"Closed"}},
				{Name: "Jammed"},
			}},
		},
		"OddDurations": {
			reason: "a duration that is not whole minutes comes back exactly",
			graph: &Graph{Name: "odd", States: []StateSpec{
				{Name: "A", Initial: true, Exits: []State{"B"}, Timeout: &Timeout{After: 1500 * time.Millisecond, To: "B"}, Retries: &Retries{Limit: 2, To: "B"}},
				{Name: "B", Final: true},
			}},
		},
		"Empty": {
			reason: "a graph without states is still a graph",
			graph:  &Graph{Name: "empty"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			js, err := tc.graph.JSON()
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseJSON(js)
			if err != nil {
				t.Fatalf("%s\nParseJSON(JSON()) = %v", tc.reason, err)
			}
			if diff := cmp.Diff(withoutStalls(tc.graph), got); diff != "" {
				t.Errorf("%s\nParseJSON(JSON()) (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestParseJSONDropsRetriesWithoutTarget(t *testing.T) {
	js, err := moose().JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseJSON(js)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := got.Lookup("Sleeping"); s.Retries != nil {
		t.Errorf("Sleeping has Retries %+v, want none: JSON does not carry a Retries without To", *s.Retries)
	}
}

func TestParseJSONNamesTheProblem(t *testing.T) {
	const states = `"states":[{"name":"A","initial":true},{"name":"B","final":true}]`
	cases := map[string]struct {
		reason string
		json   string
		names  string // a part of the error that points at the problem
	}{
		"NotJSON": {
			reason: "a truncated file is not a graph",
			json:   `{"name":"x",`,
			names:  "graph JSON",
		},
		"UnknownMode": {
			reason: "only the modes kfsm runs can be read",
			json:   `{"name":"x","mode":"Waterfall",` + states + `,"edges":[]}`,
			names:  `"Waterfall"`,
		},
		"MissingMode": {
			reason: "JSON always writes the mode",
			json:   `{"name":"x",` + states + `,"edges":[]}`,
			names:  "unknown mode",
		},
		"UnknownKind": {
			reason: "an edge kind from a newer kfsm cannot be placed",
			json:   `{"name":"x","mode":"Lifecycle",` + states + `,"edges":[{"from":"A","to":"B","kind":"teleport"}]}`,
			names:  `"teleport"`,
		},
		"BadDuration": {
			reason: "a timeout needs a duration Go can parse",
			json:   `{"name":"x","mode":"Lifecycle",` + states + `,"edges":[{"from":"A","to":"B","kind":"timeout","after":"soon"}]}`,
			names:  "bad duration",
		},
		"MissingDuration": {
			reason: "a timeout without a duration is not a timeout",
			json:   `{"name":"x","mode":"Lifecycle",` + states + `,"edges":[{"from":"A","to":"B","kind":"timeout"}]}`,
			names:  "bad duration",
		},
		"EdgeFromUndeclaredState": {
			reason: "an edge belongs to the state it leaves",
			json:   `{"name":"x","mode":"Lifecycle",` + states + `,"edges":[{"from":"Ghost","to":"B","kind":"exit","priority":1}]}`,
			names:  `"Ghost"`,
		},
		"DuplicateState": {
			reason: "edges of a state declared twice could belong to either",
			json:   `{"name":"x","mode":"Lifecycle","states":[{"name":"A"},{"name":"A"}],"edges":[]}`,
			names:  `"A" is declared twice`,
		},
		"TwoTimeouts": {
			reason: "a state has one timeout",
			json: `{"name":"x","mode":"Lifecycle",` + states + `,"edges":[` +
				`{"from":"A","to":"B","kind":"timeout","after":"1s"},{"from":"A","to":"B","kind":"timeout","after":"2s"}]}`,
			names: "two timeout edges",
		},
		"TwoRetries": {
			reason: "a state has one retry limit",
			json: `{"name":"x","mode":"Lifecycle",` + states + `,"edges":[` +
				`{"from":"A","to":"B","kind":"retries","limit":1},{"from":"A","to":"B","kind":"retries","limit":2}]}`,
			names: "two retries edges",
		},
		"PriorityOutOfOrder": {
			reason: "exits keep their priority order; a priority that disagrees was edited by hand",
			json:   `{"name":"x","mode":"Lifecycle",` + states + `,"edges":[{"from":"A","to":"B","kind":"exit","priority":2}]}`,
			names:  "priority 2",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := ParseJSON([]byte(tc.json))
			if err == nil {
				t.Fatalf("%s\nParseJSON() = %+v, want an error", tc.reason, g)
			}
			if !strings.Contains(err.Error(), tc.names) {
				t.Errorf("%s\nParseJSON() error %q does not mention %s", tc.reason, err, tc.names)
			}
		})
	}
}

func FuzzParseJSONReadsBackWhatJSONWrote(f *testing.F) {
	for _, seed := range graphSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := graphFromBytes(data)
		js, err := g.JSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseJSON(js)
		names := map[State]bool{}
		for _, s := range g.States {
			names[s.Name] = true
		}
		if len(names) < len(g.States) {
			if err == nil {
				t.Fatalf("ParseJSON read a graph that declares a state twice:\n%s", js)
			}
			return
		}
		if err != nil {
			t.Fatalf("ParseJSON(JSON()) = %v\n%s", err, js)
		}
		if diff := cmp.Diff(withoutStalls(g), got); diff != "" {
			t.Fatalf("ParseJSON(JSON()) (-want +got):\n%s", diff)
		}
	})
}
