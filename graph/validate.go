package graph

import (
	"fmt"
	"slices"
	"strings"
)

// ProblemCode classifies a problem that Validate finds.
type ProblemCode string

// The problems Validate reports.
const (
	EmptyName         ProblemCode = "EmptyName"
	DuplicateState    ProblemCode = "DuplicateState"
	MissingInitial    ProblemCode = "MissingInitial"
	DuplicateInitial  ProblemCode = "DuplicateInitial"
	DuplicateOnDelete ProblemCode = "DuplicateOnDelete"
	UnknownTarget     ProblemCode = "UnknownTarget"
	DuplicateExit     ProblemCode = "DuplicateExit"
	Unreachable       ProblemCode = "Unreachable"
	NoExit            ProblemCode = "NoExit"
	FinalWithExits    ProblemCode = "FinalWithExits"
	BadTimeout        ProblemCode = "BadTimeout"
	BadRetries        ProblemCode = "BadRetries"
	Cycle             ProblemCode = "Cycle"
	DeletionNeverEnds ProblemCode = "DeletionNeverEnds"
)

// Problem is one thing wrong with a graph.
type Problem struct {
	Code ProblemCode
	// States are the states involved, in the order that explains the
	// problem (a cycle lists its states along the cycle).
	States []State
	// Detail says what is wrong in words.
	Detail string
}

// ValidationError lists every problem of a graph.
type ValidationError struct {
	Graph    string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "state graph %q has %d problem", e.Graph, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.Detail)
	}
	return b.String()
}

// Has reports whether the error lists a problem with the given code.
func (e *ValidationError) Has(code ProblemCode) bool {
	return slices.ContainsFunc(e.Problems, func(p Problem) bool { return p.Code == code })
}

// Validate returns nil for a sound graph, or a *ValidationError that lists
// every problem at once, each naming the states involved.
func (g *Graph) Validate() error {
	v := validator{g: g, declared: map[State]bool{}}
	v.declarations()
	v.edges()
	v.reachability()
	if g.Mode == Pipeline {
		v.cycles()
	}
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Graph: g.Name, Problems: v.problems}
}

type validator struct {
	g        *Graph
	declared map[State]bool
	problems []Problem
}

func (v *validator) add(code ProblemCode, states []State, format string, args ...any) {
	v.problems = append(v.problems, Problem{Code: code, States: states, Detail: fmt.Sprintf(format, args...)})
}

func (v *validator) declarations() {
	var initial, onDelete []State
	for i, s := range v.g.States {
		if s.Name == "" {
			v.add(EmptyName, nil, "state number %d has an empty name", i+1)
			continue
		}
		if v.declared[s.Name] {
			v.add(DuplicateState, []State{s.Name}, "state %s is declared more than once", s.Name)
		}
		v.declared[s.Name] = true
		if s.Initial {
			initial = append(initial, s.Name)
		}
		if s.OnDelete {
			onDelete = append(onDelete, s.Name)
		}
	}
	switch {
	case len(initial) == 0:
		v.add(MissingInitial, nil, "no initial state is declared")
	case len(initial) > 1:
		v.add(DuplicateInitial, initial, "more than one initial state: %s", join(initial, ", "))
	}
	if len(onDelete) > 1 {
		v.add(DuplicateOnDelete, onDelete, "more than one deletion state: %s", join(onDelete, ", "))
	}
}

func (v *validator) edges() {
	for _, s := range v.g.States {
		if s.Name == "" {
			continue
		}
		seen := map[State]bool{}
		for _, to := range s.Exits {
			if seen[to] {
				v.add(DuplicateExit, []State{s.Name, to}, "state %s declares its exit to %s more than once", s.Name, to)
			}
			seen[to] = true
			v.target(s.Name, to, "an exit")
		}
		if t := s.Timeout; t != nil {
			if t.After <= 0 {
				v.add(BadTimeout, []State{s.Name}, "state %s has a timeout of %s; it must be positive", s.Name, t.After)
			}
			v.target(s.Name, t.To, "a timeout edge")
		}
		if r := s.Retries; r != nil {
			if r.Limit < 1 {
				v.add(BadRetries, []State{s.Name}, "state %s allows %d retries; it must allow at least 1", s.Name, r.Limit)
			}
			if r.To != "" {
				v.target(s.Name, r.To, "a retries edge")
			}
		}
		hasExit := len(s.Exits) > 0 || s.Timeout != nil || (s.Retries != nil && s.Retries.To != "")
		switch {
		case s.Final && hasExit:
			v.add(FinalWithExits, []State{s.Name}, "state %s is final but declares exits", s.Name)
		case !s.Final && !hasExit:
			v.add(NoExit, []State{s.Name}, "state %s is not final and has no exit: objects would stay there for ever", s.Name)
		}
	}
}

func (v *validator) target(from, to State, what string) {
	if !v.declared[to] {
		v.add(UnknownTarget, []State{from, to}, "state %s has %s to %s, which is not declared", from, what, to)
	}
}

func (v *validator) reachability() {
	initial, onDelete := v.g.Initial(), v.g.OnDelete()
	var starts []State
	for _, s := range v.g.States {
		if s.Initial || s.OnDelete {
			starts = append(starts, s.Name)
		}
	}
	if initial != "" {
		reached := v.g.reachable(starts...)
		for _, s := range v.g.States {
			if s.Name != "" && !reached[s.Name] {
				v.add(Unreachable, []State{s.Name}, "state %s cannot be reached from the initial state %s%s", s.Name, initial, orDeletion(onDelete))
			}
		}
	}
	if onDelete != "" {
		ends := false
		for s := range v.g.reachable(onDelete) {
			if spec, ok := v.g.Lookup(s); ok && spec.Final {
				ends = true
			}
		}
		if !ends {
			v.add(DeletionNeverEnds, []State{onDelete}, "the deletion path from %s reaches no final state, so the finalizer would never be removed", onDelete)
		}
	}
}

func orDeletion(onDelete State) string {
	if onDelete == "" {
		return ""
	}
	return " or the deletion state " + string(onDelete)
}

// cycles reports each cycle once, as found by a depth-first search in
// declaration order, so that the report is deterministic.
func (v *validator) cycles() {
	next := v.g.successors()
	const (
		unvisited = iota
		onStack
		done
	)
	mark := map[State]int{}
	var stack []State
	var visit func(s State)
	visit = func(s State) {
		mark[s] = onStack
		stack = append(stack, s)
		for _, to := range next[s] {
			switch mark[to] {
			case onStack:
				i := slices.Index(stack, to)
				cycle := slices.Clone(stack[i:])
				v.add(Cycle, cycle, "pipeline graphs must be acyclic, but %s -> %s is a cycle", join(cycle, " -> "), to)
			case unvisited:
				if v.declared[to] {
					visit(to)
				}
			}
		}
		stack = stack[:len(stack)-1]
		mark[s] = done
	}
	for _, s := range v.g.States {
		if s.Name != "" && mark[s.Name] == unvisited {
			visit(s.Name)
		}
	}
}

func join(states []State, sep string) string {
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = string(s)
	}
	return strings.Join(parts, sep)
}
