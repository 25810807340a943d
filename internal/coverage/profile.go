// Package coverage counts the edges of kfsm machines that tests take, and
// reads and writes the profiles that fsmtest's -kfsm.coverprofile writes and
// kfsm cover merges and draws.
package coverage

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/kfsm/kfsm/graph"
)

// The profile format is JSON lines, so that the profiles of several test
// packages merge by concatenation, like those of go test -coverprofile:
//
//	{"kfsmCoverage":1}
//	{"machine":"moose","graph":{...}}
//	{"machine":"moose","from":"Roaming","to":"Eating","kind":"exit","taken":3}
//
// The first line marks the format; after a concatenation it appears again
// wherever a file started. A machine's graph line comes before its edge
// lines, and the graph travels with the counts so that kfsm cover can draw
// it without the operator's code.

// profileVersion is the version in the format line; a reader refuses others.
const profileVersion = 1

type profileHeader struct {
	Version int `json:"kfsmCoverage"`
}

type profileGraph struct {
	Machine string          `json:"machine"`
	Graph   json.RawMessage `json:"graph"`
}

type profileEdge struct {
	Machine string      `json:"machine"`
	From    graph.State `json:"from"`
	To      graph.State `json:"to"`
	Kind    string      `json:"kind"`
	Taken   int         `json:"taken"`
}

// Profile is the edge coverage of one or more machines. It is safe for
// concurrent use, so that the reconcilers of several tests can count into
// one. The zero Profile is empty and ready to use.
type Profile struct {
	mu       sync.Mutex
	machines map[string]*machineCoverage
}

type machineCoverage struct {
	graph *graph.Graph
	edges []graph.EdgeKey // the graph's CoverageEdges, in order
	taken map[graph.EdgeKey]int
}

func newMachineCoverage(g *graph.Graph) *machineCoverage {
	m := &machineCoverage{graph: g, edges: g.CoverageEdges(), taken: map[graph.EdgeKey]int{}}
	for _, e := range m.edges {
		m.taken[e] = 0
	}
	return m
}

// New returns an empty profile.
func New() *Profile {
	return &Profile{}
}

// AddMachine declares a machine's graph; its edges start at zero. Adding
// the same name twice keeps the first graph, and is an error if the two
// graphs' CoverageEdges differ: the counts would not mean the same edges.
func (p *Profile) AddMachine(name string, g *graph.Graph) error {
	if g == nil {
		return fmt.Errorf("machine %s: no graph", name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.add(name, newMachineCoverage(g))
}

// add keeps an existing machine if m has the same edges. The caller holds mu.
func (p *Profile) add(name string, m *machineCoverage) error {
	if old, ok := p.machines[name]; ok {
		if !slices.Equal(old.edges, m.edges) {
			return fmt.Errorf("machine %s: the graph differs from the one declared before", name)
		}
		return nil
	}
	if p.machines == nil {
		p.machines = map[string]*machineCoverage{}
	}
	p.machines[name] = m
	return nil
}

// Take counts one taking of an edge. An edge not among the machine's
// CoverageEdges, or of an undeclared machine, is ignored and reported false.
func (p *Profile) Take(machine string, e graph.EdgeKey) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[machine]
	if !ok {
		return false
	}
	if _, ok := m.taken[e]; !ok {
		return false
	}
	m.taken[e]++
	return true
}

// Merge adds o's machines and counts to p. A machine of o whose name p
// has for another graph is kept apart, under the name and a number.
func (p *Profile) Merge(o *Profile) error {
	if o == nil {
		return nil
	}
	// A copy of o, so that p and o are never locked together.
	theirs := map[string]*machineCoverage{}
	o.mu.Lock()
	for name, m := range o.machines {
		theirs[name] = &machineCoverage{graph: m.graph, edges: m.edges, taken: maps.Clone(m.taken)}
	}
	o.mu.Unlock()

	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(theirs)) {
		m := theirs[name]
		name = p.nameFor(name, m.edges)
		mine, ok := p.machines[name]
		if !ok {
			_ = p.add(name, m)
			continue
		}
		for e, n := range m.taken {
			mine.taken[e] += n
		}
	}
	return nil
}

// nameFor is the name under which p keeps a machine called name with
// these edges: its own, or, when p has another graph of that name (two
// packages may give one name to different machines), the name with the
// first free or matching number, such as rollout#2. p.mu is held.
func (p *Profile) nameFor(name string, edges []graph.EdgeKey) string {
	for i, n := 2, name; ; i, n = i+1, fmt.Sprintf("%s#%d", name, i) {
		if m, ok := p.machines[n]; !ok || slices.Equal(m.edges, edges) {
			return n
		}
	}
}

// Read reads a profile that WriteTo wrote, or several of them
// concatenated, whose counts it sums; machines of one name and different
// graphs are kept apart, as Merge does. An error names the line at fault.
func Read(r io.Reader) (*Profile, error) {
	p := New()
	declared := map[string]string{} // machine to the name it is kept under
	br := bufio.NewReader(r)
	seenHeader := false
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if perr := p.readLine(line, &seenHeader, declared); perr != nil {
				return nil, fmt.Errorf("line %d: %w", n, perr)
			}
		}
		if errors.Is(err, io.EOF) {
			return p, nil
		}
	}
}

// readLine reads one non-blank line of a profile into p.
func (p *Profile) readLine(line []byte, seenHeader *bool, declared map[string]string) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if _, ok := fields["kfsmCoverage"]; ok {
		var h profileHeader
		if err := json.Unmarshal(line, &h); err != nil {
			return fmt.Errorf("bad format line: %w", err)
		}
		if h.Version != profileVersion {
			return fmt.Errorf("kfsm coverage format %d, this kfsm reads %d", h.Version, profileVersion)
		}
		*seenHeader = true
		return nil
	}
	if !*seenHeader {
		return fmt.Errorf(`not a kfsm coverage profile: the first line is not {"kfsmCoverage":%d}`, profileVersion)
	}
	if _, ok := fields["graph"]; ok {
		var pg profileGraph
		if err := json.Unmarshal(line, &pg); err != nil {
			return fmt.Errorf("bad graph line: %w", err)
		}
		if pg.Machine == "" {
			return errors.New("graph line without a machine")
		}
		g, err := graph.ParseJSON(pg.Graph)
		if err != nil {
			return fmt.Errorf("machine %s: %w", pg.Machine, err)
		}
		m := newMachineCoverage(g)
		p.mu.Lock()
		name := p.nameFor(pg.Machine, m.edges)
		err = p.add(name, m)
		p.mu.Unlock()
		if err != nil {
			return fmt.Errorf("machine %s: %w", pg.Machine, err)
		}
		declared[pg.Machine] = name // its edge lines follow
		return nil
	}
	var pe profileEdge
	if err := json.Unmarshal(line, &pe); err != nil {
		return fmt.Errorf("bad edge line: %w", err)
	}
	if pe.Machine == "" {
		return errors.New("edge line without a machine")
	}
	name, ok := declared[pe.Machine]
	if !ok {
		return fmt.Errorf("machine %s has no graph line before its edges", pe.Machine)
	}
	if pe.Taken < 0 {
		return fmt.Errorf("machine %s: edge %s taken %d times", pe.Machine, coverageEdgeName(profileEdgeKey(pe)), pe.Taken)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.machines[name]
	e := profileEdgeKey(pe)
	if _, ok := m.taken[e]; !ok {
		return fmt.Errorf("machine %s has no edge %s", pe.Machine, coverageEdgeName(e))
	}
	m.taken[e] += pe.Taken
	return nil
}

func profileEdgeKey(pe profileEdge) graph.EdgeKey {
	return graph.EdgeKey{From: pe.From, To: pe.To, Kind: pe.Kind}
}

// WriteTo writes the profile in the format Read reads. The output
// is deterministic: machines sorted by name, each graph line followed by
// its edges in CoverageEdges order, zero counts included.
func (p *Profile) WriteTo(w io.Writer) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(profileHeader{Version: profileVersion}); err != nil {
		return 0, err
	}
	for _, name := range slices.Sorted(maps.Keys(p.machines)) {
		m := p.machines[name]
		js, err := m.graph.CompactJSON()
		if err != nil {
			return 0, fmt.Errorf("machine %s: %w", name, err)
		}
		if err := enc.Encode(profileGraph{Machine: name, Graph: js}); err != nil {
			return 0, err
		}
		for _, e := range m.edges {
			if err := enc.Encode(profileEdge{Machine: name, From: e.From, To: e.To, Kind: e.Kind, Taken: m.taken[e]}); err != nil {
				return 0, err
			}
		}
	}
	return b.WriteTo(w)
}

// Machines returns the names of the profile's machines, sorted.
func (p *Profile) Machines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.machines))
}

// Graph returns a machine's graph, or nil for a machine not in the profile.
func (p *Profile) Graph(machine string) *graph.Graph {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.machines[machine]; ok {
		return m.graph
	}
	return nil
}

// Taken returns how many times each of a machine's coverage edges was
// taken, zeros included; nil for a machine not in the profile. The map is
// a copy.
func (p *Profile) Taken(machine string) map[graph.EdgeKey]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.machines[machine]; ok {
		return maps.Clone(m.taken)
	}
	return nil
}

// Superseded reports whether the profile holds a later version of
// machine's graph, under another name (such as moose#2 beside moose): an
// earlier release's machine that a test kept to migrate from, which a
// coverage threshold leaves out.
func (p *Profile) Superseded(machine string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.later(p.machines[machine]) > 0
}

// later returns the latest version of m's graph that the profile holds
// if it is later than m's, else 0. p.mu is held.
func (p *Profile) later(m *machineCoverage) int {
	latest := 0
	for _, o := range p.machines {
		if m != nil && m.graph != nil && o.graph != nil && o.graph.Name == m.graph.Name && graphVersion(o.graph) > max(graphVersion(m.graph), latest) {
			latest = graphVersion(o.graph)
		}
	}
	return latest
}

// Covered returns how many of the machine's coverage edges were taken at
// least once, and the total.
func (p *Profile) Covered(machine string) (taken, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.machines[machine]
	if !ok {
		return 0, 0
	}
	return len(m.edges) - len(m.untaken()), len(m.edges)
}

// Summary is one line per machine that has edges, saying how many edges
// were covered and which were never taken:
//
//	machine moose: 7/9 edges covered; never taken: Roaming→Lost (timeout), on delete→Releasing
//
// Exits show as From→To, other edges with their kind in parentheses. Each
// line starts with the machine's Label: when the profile holds several
// versions of a machine's graph, one line per version, the current one
// first.
func (p *Profile) Summary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, name := range p.sorted() {
		m := p.machines[name]
		if len(m.edges) == 0 {
			continue // a machine of one state: nothing to take
		}
		never := m.untaken()
		fmt.Fprintf(&b, "machine %s: %d/%d edges covered", p.label(name), len(m.edges)-len(never), len(m.edges))
		if len(never) > 0 {
			names := make([]string, len(never))
			for i, e := range never {
				names[i] = coverageEdgeName(e)
			}
			fmt.Fprintf(&b, "; never taken: %s", strings.Join(names, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Label names a machine of the profile for people. It is the machine's
// name, unless the profile holds several versions of the machine's graph
// (a test kept an earlier one to migrate from): then it says which
// version the machine's edges belong to, and whether it is the current
// one, the latest of the profile:
//
//	moose, graph version 2 (current)
//	moose, graph version 1 (superseded by version 2)
//
// The name is numbered, as in moose#2, only for another graph of the same
// name and version.
func (p *Profile) Label(machine string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.label(machine)
}

// label is Label; p.mu is held.
func (p *Profile) label(name string) string {
	m, ok := p.machines[name]
	if !ok || m.graph == nil {
		return name
	}
	versions := p.versions(m.graph.Name)
	if len(versions) < 2 {
		return name
	}
	v := graphVersion(m.graph)
	base := m.graph.Name
	for other, o := range p.machines {
		if other != name && o.graph != nil && o.graph.Name == base && graphVersion(o.graph) == v {
			base = name // two graphs of one name and version: the number tells them apart
		}
	}
	if latest := versions[len(versions)-1]; v < latest {
		return fmt.Sprintf("%s, graph version %d (superseded by version %d)", base, v, latest)
	}
	return fmt.Sprintf("%s, graph version %d (current)", base, v)
}

// versions lists the versions of the machine's graph that the profile
// holds, in order. p.mu is held.
func (p *Profile) versions(machine string) []int {
	var out []int
	for _, m := range p.machines {
		if m.graph != nil && m.graph.Name == machine && !slices.Contains(out, graphVersion(m.graph)) {
			out = append(out, graphVersion(m.graph))
		}
	}
	slices.Sort(out)
	return out
}

// sorted lists the profile's machines by name, the versions of one
// machine's graph together, the latest first. p.mu is held.
func (p *Profile) sorted() []string {
	names := slices.Collect(maps.Keys(p.machines))
	key := func(name string) (string, int) {
		m := p.machines[name]
		if m.graph == nil || len(p.versions(m.graph.Name)) < 2 {
			return name, 0
		}
		return m.graph.Name, graphVersion(m.graph)
	}
	slices.SortFunc(names, func(a, b string) int {
		na, va := key(a)
		nb, vb := key(b)
		return cmp.Or(strings.Compare(na, nb), vb-va, strings.Compare(a, b))
	})
	return names
}

// graphVersion is a graph's version; a graph that declares none is at 1.
func graphVersion(g *graph.Graph) int { return max(g.Version, 1) }

// untaken lists the coverage edges never taken, in order.
func (m *machineCoverage) untaken() []graph.EdgeKey {
	var never []graph.EdgeKey
	for _, e := range m.edges {
		if m.taken[e] <= 0 {
			never = append(never, e)
		}
	}
	return never
}

// coverageEdgeName names an edge for people: the kind in parentheses unless it is
// an exit, the most common kind; the deletion entry as "on delete".
func coverageEdgeName(e graph.EdgeKey) string {
	switch e.Kind {
	case graph.Exit.String():
		return fmt.Sprintf("%s→%s", e.From, e.To)
	case graph.DeleteEntry:
		return fmt.Sprintf("on delete→%s", e.To)
	}
	return fmt.Sprintf("%s→%s (%s)", e.From, e.To, e.Kind)
}
