package graph

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// LockFile is the name of a machine's lock file, which a project keeps in
// the directory of the package that declares the machine: kfsm vet looks
// for it there.
func LockFile(machine string) string { return machine + ".graph.lock.json" }

// UpdateLockFile checks g against the lock that the file in dir named by
// LockFile keeps, if there is one, writes the file with g recorded as its
// version's graph (see [Lock.Update]) and returns the lock. On a failure
// the file stays as it was.
func UpdateLockFile(dir string, g *Graph, stranded func(earlier *Graph) []State) (*Lock, error) {
	file := filepath.Join(dir, LockFile(g.Name))
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	l, err := ParseLock(data)
	if err == nil {
		err = l.Update(g, stranded)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	out, err := l.JSON()
	if err != nil {
		return nil, err
	}
	return l, os.WriteFile(file, out, 0o644)
}

// Earlier returns the graphs of the versions before current, each in
// compact JSON by its version's number, for a published graph to carry;
// nil if there are none.
func (l *Lock) Earlier(current int) (map[string]json.RawMessage, error) {
	var out map[string]json.RawMessage
	for v, g := range l.Graphs {
		if v >= current {
			continue
		}
		doc, err := g.CompactJSON()
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]json.RawMessage{}
		}
		out[strconv.Itoa(v)] = doc
	}
	return out, nil
}

// Lock holds the graphs of a machine's versions as a project released
// them, kept in a committed file, so that code generation can refuse a
// change of the graph that would strand objects in a cluster: a state
// gone with no migration to say where its objects go. The graph of each
// version is the last one generated at that version; an earlier version's
// graph stays as it was released.
type Lock struct {
	Machine string
	// Graphs holds each version's graph, by version (1 for a graph
	// without a Version).
	Graphs map[int]*Graph
}

// ParseLock reads a lock that JSON wrote. Empty data is an empty lock.
func ParseLock(data []byte) (*Lock, error) {
	l := &Lock{Graphs: map[int]*Graph{}}
	if len(strings.TrimSpace(string(data))) == 0 {
		return l, nil
	}
	var in struct {
		Machine string                     `json:"machine"`
		Graphs  map[string]json.RawMessage `json:"graphs"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("graph lock: %w", err)
	}
	l.Machine = in.Machine
	for key, raw := range in.Graphs {
		v, err := strconv.Atoi(key)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("graph lock: version %q is not a number from 1", key)
		}
		g, err := ParseJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("graph lock: version %d: %w", v, err)
		}
		l.Graphs[v] = g
	}
	return l, nil
}

// JSON writes the lock, its versions in order.
func (l *Lock) JSON() ([]byte, error) {
	var b strings.Builder
	name, err := json.Marshal(l.Machine)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(&b, "{\n  \"machine\": %s,\n  \"graphs\": {", name)
	for i, v := range slices.Sorted(maps.Keys(l.Graphs)) {
		doc, err := l.Graphs[v].JSON()
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n    \"%d\": %s", v, strings.ReplaceAll(strings.TrimSpace(string(doc)), "\n", "\n    "))
	}
	b.WriteString("\n  }\n}\n")
	return []byte(b.String()), nil
}

// StrandingError names the states of locked graphs whose objects a new
// graph would strand.
type StrandingError struct {
	Machine string
	// Stranded holds the stranded states of each locked version.
	Stranded map[int][]State
	// Next is the version that a migration would lead into.
	Next int
}

func (e *StrandingError) Error() string {
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(e.Stranded)) {
		for _, s := range e.Stranded[v] {
			parts = append(parts, fmt.Sprintf("state %s of version %d", s, v))
		}
	}
	first := e.Stranded[slices.Min(slices.Collect(maps.Keys(e.Stranded)))][0]
	return fmt.Sprintf("machine %s strands the objects of %s: no migration says where they go; declare one, such as Machine.Version(%d, fsm.Rename(%q, ...)), or with fsm.Remove, fsm.Merge or fsm.Split",
		e.Machine, strings.Join(parts, ", "), e.Next, first)
}

// Update checks g against every locked graph and, if it strands no state
// of any, records it as its version's graph. stranded says which states
// of an earlier graph the new one's machine cannot place (fsm's
// Machine.Stranded); a failure is a *StrandingError, and leaves the lock
// as it was.
func (l *Lock) Update(g *Graph, stranded func(earlier *Graph) []State) error {
	if l.Machine != "" && l.Machine != g.Name {
		return fmt.Errorf("graph lock: the lock is machine %s's, not %s's", l.Machine, g.Name)
	}
	version := max(g.Version, 1)
	errs := &StrandingError{Machine: g.Name, Stranded: map[int][]State{}, Next: version}
	for v, earlier := range l.Graphs {
		if v > version {
			return fmt.Errorf("graph lock: machine %s is at version %d, but version %d was released: going back needs a version after it", g.Name, version, v)
		}
		if s := stranded(earlier); len(s) > 0 {
			errs.Stranded[v] = s
			if v == version {
				errs.Next = version + 1
			}
		}
	}
	if len(errs.Stranded) > 0 {
		return errs
	}
	l.Machine = g.Name
	if l.Graphs == nil {
		l.Graphs = map[int]*Graph{}
	}
	l.Graphs[version] = g
	return nil
}
