package graph

import (
	"fmt"
	"slices"
	"time"
)

// State names a state of a machine. States are plain names so that they can
// be persisted in an object's status and read back after a restart.
type State string

// Mode says how a machine runs its graph.
type Mode int

const (
	// Lifecycle machines persist the current state and resume there on every
	// reconcile. Cycles are allowed across reconciles.
	Lifecycle Mode = iota
	// Pipeline machines walk from the initial state on every reconcile until
	// a state waits, fails or is final. The graph must be acyclic.
	Pipeline
)

func (m Mode) String() string {
	switch m {
	case Lifecycle:
		return "Lifecycle"
	case Pipeline:
		return "Pipeline"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Graph is the declared shape of a machine: its states, in declaration
// order, and their exits. It is data; Validate checks it.
type Graph struct {
	// Name is the machine's name, used in exports and messages.
	Name string
	Mode Mode
	// Version is the graph's version, which migrations between versions
	// name (fsm's Machine.Version); 0 stands for 1, the first.
	Version int
	States  []StateSpec
}

// StateSpec declares one state.
type StateSpec struct {
	Name State
	// Initial marks the state where objects start. Exactly one state has it.
	Initial bool
	// Final marks a state that ends the walk: a finished pipeline pass, a
	// completed lifecycle or, on the deletion path, the point where the
	// finalizer is removed. A final state has no exits.
	Final bool
	// OnDelete marks the state where the deletion path starts, whatever
	// state the object was in. At most one state has it.
	OnDelete bool
	// Exits are the states this one may move to, in priority order: when a
	// handler reports several events, the first declared exit that matches
	// one of them wins.
	Exits []State
	// Timeout, when set, moves an object that stayed in this state longer
	// than After to To.
	Timeout *Timeout
	// Retries, when set, bounds the failed attempts in this state: after
	// Limit failures the object moves to To or, without To, is stalled.
	Retries *Retries
}

// Timeout is an edge taken when an object stays too long in a state.
type Timeout struct {
	After time.Duration
	To    State
}

// Retries bounds the failed attempts in a state.
type Retries struct {
	Limit int
	// To is the state to move to once Limit attempts failed; empty means
	// the object is stalled instead.
	To State
}

// EdgeKind tells why an edge exists.
type EdgeKind int

const (
	// Exit is an edge the state's handler may take.
	Exit EdgeKind = iota
	// TimeoutExit is taken when the state's timeout expires.
	TimeoutExit
	// RetriesExit is taken when the state's retries are exhausted.
	RetriesExit
)

func (k EdgeKind) String() string {
	switch k {
	case Exit:
		return "exit"
	case TimeoutExit:
		return "timeout"
	case RetriesExit:
		return "retries"
	}
	return fmt.Sprintf("EdgeKind(%d)", int(k))
}

// Edge is one arrow of the graph.
type Edge struct {
	From, To State
	Kind     EdgeKind
	// Priority is the 1-based position among the state's exits, for Exit
	// edges; zero otherwise.
	Priority int
	// After is the timeout, for TimeoutExit edges.
	After time.Duration
	// Limit is the number of failed attempts, for RetriesExit edges.
	Limit int
}

// Edges lists every edge: for each state in declaration order, its exits in
// priority order, then its timeout edge, then its retries edge.
func (g *Graph) Edges() []Edge {
	var edges []Edge
	for _, s := range g.States {
		for i, to := range s.Exits {
			edges = append(edges, Edge{From: s.Name, To: to, Kind: Exit, Priority: i + 1})
		}
		if s.Timeout != nil {
			edges = append(edges, Edge{From: s.Name, To: s.Timeout.To, Kind: TimeoutExit, After: s.Timeout.After})
		}
		if s.Retries != nil && s.Retries.To != "" {
			edges = append(edges, Edge{From: s.Name, To: s.Retries.To, Kind: RetriesExit, Limit: s.Retries.Limit})
		}
	}
	return edges
}

// Lookup returns the declaration of state s.
func (g *Graph) Lookup(s State) (StateSpec, bool) {
	for _, spec := range g.States {
		if spec.Name == s {
			return spec, true
		}
	}
	return StateSpec{}, false
}

// Initial returns the initial state, or "" if none is marked.
func (g *Graph) Initial() State {
	return g.first(func(s StateSpec) bool { return s.Initial })
}

// OnDelete returns the state where the deletion path starts, or "".
func (g *Graph) OnDelete() State {
	return g.first(func(s StateSpec) bool { return s.OnDelete })
}

func (g *Graph) first(pred func(StateSpec) bool) State {
	for _, s := range g.States {
		if pred(s) {
			return s.Name
		}
	}
	return ""
}

// DeletionPath returns the states reachable from the OnDelete state, itself
// included, in declaration order.
func (g *Graph) DeletionPath() []State {
	start := g.OnDelete()
	if start == "" {
		return nil
	}
	reached := g.reachable(start)
	var path []State
	for _, s := range g.States {
		if reached[s.Name] {
			path = append(path, s.Name)
		}
	}
	return path
}

// successors maps each state to the distinct targets of its edges, in
// edge order.
func (g *Graph) successors() map[State][]State {
	next := make(map[State][]State, len(g.States))
	for _, e := range g.Edges() {
		if !slices.Contains(next[e.From], e.To) {
			next[e.From] = append(next[e.From], e.To)
		}
	}
	return next
}

// reachable returns the states reachable from the starts, the starts included.
func (g *Graph) reachable(starts ...State) map[State]bool {
	next := g.successors()
	return search(starts, func(s State) []State { return next[s] })
}

// search returns the states reachable from the starts through next, the
// starts included.
func search(starts []State, next func(State) []State) map[State]bool {
	seen := map[State]bool{}
	stack := append([]State(nil), starts...)
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		stack = append(stack, next(s)...)
	}
	return seen
}
