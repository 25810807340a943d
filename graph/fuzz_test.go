package graph

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzNames include an empty name and names that need quoting in exports.
var fuzzNames = []State{"A", "B", "C", "D", "", `q"uote`, "back\\slash\nline", "E"}

// graphFromBytes decodes fuzz input into a graph: the first byte picks the
// mode, then every five bytes declare a state: its name, flags, exits as a
// bit mask over the names, and timeout and retries targets and values.
func graphFromBytes(data []byte) *Graph {
	g := &Graph{Name: "fuzz"}
	if len(data) == 0 {
		return g
	}
	g.Mode = Mode(data[0] % 2)
	data = data[1:]
	for len(data) >= 5 {
		name, flags, exits, timeout, retries := data[0], data[1], data[2], data[3], data[4]
		data = data[5:]
		s := StateSpec{
			Name:     fuzzNames[name%8],
			Initial:  flags&1 != 0,
			Final:    flags&2 != 0,
			OnDelete: flags&4 != 0,
		}
		for i := range 8 {
			if exits&(1<<i) != 0 {
				s.Exits = append(s.Exits, fuzzNames[(int(name)+i)%8])
			}
		}
		if flags&8 != 0 {
			s.Timeout = &Timeout{After: time.Duration(int8(timeout)) * time.Second, To: fuzzNames[timeout%8]}
		}
		if flags&16 != 0 {
			s.Retries = &Retries{Limit: int(int8(retries)) % 4}
			if flags&32 != 0 {
				s.Retries.To = fuzzNames[retries%8]
			}
		}
		g.States = append(g.States, s)
	}
	return g
}

// graphSeeds are the fuzz tests' first inputs for graphFromBytes.
var graphSeeds = [][]byte{
	{},
	{0, 0, 1, 2, 0, 0, 1, 2, 0, 0, 0},
	{1, 0, 1, 0b11, 0, 0, 1, 0, 0b1, 0, 0, 2, 6, 0, 0, 0},
	{0, 5, 4, 1, 9, 3, 6, 56, 0, 200, 131},
}

func FuzzValidate(f *testing.F) {
	for _, seed := range graphSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := graphFromBytes(data)
		err := g.Validate()
		again := g.Validate()
		if (err == nil) != (again == nil) || (err != nil && err.Error() != again.Error()) {
			t.Fatalf("Validate is not deterministic: %v then %v", err, again)
		}
		dot, mermaid := g.DOT(), g.Mermaid()
		js, jerr := g.JSON()
		if jerr != nil {
			t.Fatalf("JSON() = %v", jerr)
		}
		if !json.Valid(js) {
			t.Fatalf("JSON() is not valid JSON:\n%s", js)
		}
		// Every path found walks declared exits from its start to its goal.
		for _, from := range fuzzNames {
			for _, to := range fuzzNames {
				path, ok := g.Path(from, to)
				if !ok {
					continue
				}
				if path[0] != from || path[len(path)-1] != to {
					t.Fatalf("Path(%q, %q) = %q", from, to, path)
				}
				for i := 1; i < len(path); i++ {
					spec, _ := g.Lookup(path[i-1])
					if !slices.Contains(spec.Exits, path[i]) {
						t.Fatalf("Path(%q, %q) = %q takes an undeclared step", from, to, path)
					}
				}
			}
		}
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("Validate() = %v, want a *ValidationError with problems", err)
			}
			return
		}
		// A valid graph is drawn whole.
		for _, s := range g.States {
			if !strings.Contains(mermaid, "state "+strconv.Quote(string(s.Name))) || !strings.Contains(dot, dotID(string(s.Name))) {
				t.Fatalf("state %q is missing from the exports", s.Name)
			}
		}
		if g.Initial() == "" {
			t.Fatal("a valid graph has no initial state")
		}
	})
}

func FuzzCheck(f *testing.F) {
	for _, seed := range graphSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := graphFromBytes(data)
		goals := []State{"A", "C"}
		found := g.Check(goals...)
		if again := g.Check(goals...); !slices.EqualFunc(found, again, func(a, b Finding) bool { return a.Walk() == b.Walk() && a.Detail == b.Detail }) {
			t.Fatalf("Check is not deterministic: %+v then %+v", found, again)
		}
		// A dense graph has hundreds of cycles; the first findings stand
		// for the rest, and keep the fuzzing fast.
		first := found[:min(len(found), 8)]
		for _, f := range first {
			if len(f.States) == 0 || f.Detail == "" {
				t.Fatalf("a finding without states or words: %+v", f)
			}
			checkSteps(t, g, f)
			if f.Code == Trap || f.Code == DeletionTrap {
				checkClosed(t, g, f)
			}
			_ = g.MermaidFinding(f)
		}
		if src := g.Scenario(first...); src != "" {
			parseScenario(t, src)
		}
		if g.Validate() == nil {
			checkEveryLiveStateRests(t, g, found)
		}
	})
}

// checkClosed fails unless the trap of f is a closed set without a final
// state.
func checkClosed(t *testing.T, g *Graph, f Finding) {
	t.Helper()
	in := setOf(f.States)
	for _, e := range g.Edges() {
		if _, declared := g.Lookup(e.To); declared && in[e.From] && !in[e.To] {
			t.Fatalf("%s %q has an edge out, to %s", f.Code, f.States, e.To)
		}
	}
	for _, s := range f.States {
		if spec, _ := g.Lookup(s); spec.Final {
			t.Fatalf("%s %q holds the final state %s", f.Code, f.States, s)
		}
	}
}

// checkEveryLiveStateRests fails unless every state reachable from the
// initial one can reach a place to rest, or can reach a trap found.
func checkEveryLiveStateRests(t *testing.T, g *Graph, found []Finding) {
	t.Helper()
	finals := false
	for s := range g.reachable(g.Initial()) {
		spec, _ := g.Lookup(s)
		finals = finals || spec.Final
	}
	for s := range g.reachable(g.Initial()) {
		ahead := g.reachable(s)
		rests := false
		for r := range ahead {
			spec, _ := g.Lookup(r)
			rests = rests || spec.Final || (!finals && spec.Timeout == nil)
		}
		trapped := slices.ContainsFunc(found, func(f Finding) bool { return f.Code == Trap && ahead[f.States[0]] })
		if !rests && !trapped {
			t.Fatalf("state %s can reach no place to rest, and no trap was found ahead of it: %+v", s, found)
		}
		if rests && slices.ContainsFunc(found, func(f Finding) bool { return f.Code == Trap && slices.Contains(f.States, s) }) {
			t.Fatalf("state %s can rest, but is in a trap found: %+v", s, found)
		}
	}
}
