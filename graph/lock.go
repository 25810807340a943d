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
	// Unreleased says that no release has shipped the graph of the
	// newest version yet, as with the sample machine of a new project:
	// no cluster holds objects in its states, so Update replaces it with
	// any graph, checking the new one against the earlier versions
	// alone, and the lock stays unreleased. A project clears it when it
	// releases the graph; from then on the lock refuses a graph that
	// strands the objects of its states.
	Unreleased bool
}

// ParseLock reads a lock that JSON wrote. Empty data is an empty lock.
func ParseLock(data []byte) (*Lock, error) {
	l := &Lock{Graphs: map[int]*Graph{}}
	if len(strings.TrimSpace(string(data))) == 0 {
		return l, nil
	}
	var in struct {
		Machine    string                     `json:"machine"`
		Unreleased bool                       `json:"unreleased"`
		Graphs     map[string]json.RawMessage `json:"graphs"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("graph lock: %w", err)
	}
	l.Machine, l.Unreleased = in.Machine, in.Unreleased
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

// JSON writes the lock, its versions in order. An unreleased lock says
// so on a line of its own, which a project deletes when it releases the
// graph.
func (l *Lock) JSON() ([]byte, error) {
	var b strings.Builder
	name, err := json.Marshal(l.Machine)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(&b, "{\n  \"machine\": %s,\n", name)
	if l.Unreleased {
		b.WriteString("  \"unreleased\": true,\n")
	}
	b.WriteString("  \"graphs\": {")
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
	// Newest is the newest version that the lock keeps. When it alone is
	// stranded and no release has shipped it, the lock may be marked
	// Unreleased instead of declaring a migration.
	Newest int
}

func (e *StrandingError) Error() string {
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(e.Stranded)) {
		for _, s := range e.Stranded[v] {
			parts = append(parts, fmt.Sprintf("state %s of version %d", s, v))
		}
	}
	first := e.Stranded[slices.Min(slices.Collect(maps.Keys(e.Stranded)))][0]
	msg := fmt.Sprintf("machine %s strands the objects of %s: no migration says where they go; declare one, such as Machine.Version(%d, fsm.Rename(%q, ...)), or with fsm.Remove, fsm.Merge or fsm.Split",
		e.Machine, strings.Join(parts, ", "), e.Next, first)
	if _, ok := e.Stranded[e.Newest]; ok && len(e.Stranded) == 1 {
		msg += fmt.Sprintf(`; or, if no release has shipped version %d, mark the lock "unreleased": true, and its graph may change freely until it is released`, e.Newest)
	}
	return msg
}

// Update checks g against every locked graph and, if it strands no state
// of any, records it as its version's graph. stranded says which states
// of an earlier graph the new one's machine cannot place (fsm's
// Machine.Stranded); a failure is a *StrandingError, and leaves the lock
// as it was. An unreleased lock's newest graph is not checked: g replaces
// it.
func (l *Lock) Update(g *Graph, stranded func(earlier *Graph) []State) error {
	if l.Machine != "" && l.Machine != g.Name {
		return fmt.Errorf("graph lock: the lock is machine %s's, not %s's", l.Machine, g.Name)
	}
	version := max(g.Version, 1)
	newest := 0
	if len(l.Graphs) > 0 {
		newest = slices.Max(slices.Collect(maps.Keys(l.Graphs)))
	}
	unreleased := 0 // the version whose graph no release has shipped, if any
	if l.Unreleased {
		unreleased = newest
	}
	errs := &StrandingError{Machine: g.Name, Stranded: map[int][]State{}, Next: version, Newest: newest}
	for v, earlier := range l.Graphs {
		if v == unreleased {
			continue
		}
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
	delete(l.Graphs, unreleased)
	l.Graphs[version] = g
	return nil
}
