// Package migrate maps the states that objects recorded under an older
// version of their machine's graph onto the states of the current one,
// by the steps that the machine declares for each version.
package migrate

import (
	"fmt"
	"maps"
	"slices"
)

// Kind is what a step does.
type Kind uint8

const (
	Rename Kind = iota + 1 // one state, now named To
	Merge                  // several states, now one: To
	Remove                 // a state gone, whose objects move to To
	Split                  // one state, now several: Pick chooses
)

func (k Kind) String() string {
	return [...]string{"", "Rename", "Merge", "Remove", "Split"}[k]
}

// Step is one change that a version made to the graph.
type Step struct {
	Kind Kind
	From []string
	To   string
	// Pick is a split's index into the machine's pick functions.
	Pick int
}

// Plan is a machine's versions and the steps into each.
type Plan struct {
	// Current is the version of the machine's graph.
	Current int
	steps   map[int][]Step // the steps that lead into each version
}

// New makes the plan of the versions' steps, and lists what is wrong
// with them: declared says which states the current graph has.
func New(versions map[int][]Step, declared func(string) bool) (*Plan, []string) {
	p := &Plan{Current: 1, steps: versions}
	var problems []string
	for _, v := range slices.Sorted(maps.Keys(versions)) {
		p.Current = max(p.Current, v)
		if v < 2 {
			problems = append(problems, fmt.Sprintf("version %d: versions start at 1, the graph before any migration, so the first migration leads into version 2", v))
		}
	}
	for _, v := range slices.Sorted(maps.Keys(versions)) {
		problems = append(problems, p.check(v, declared)...)
	}
	return p, problems
}

// Version is the version of the machine's graph: Current, or 1 for a
// machine without versions, whose plan is nil.
func (p *Plan) Version() int {
	if p == nil {
		return 1
	}
	return p.Current
}

// check lists what is wrong with the steps into version v.
func (p *Plan) check(v int, declared func(string) bool) []string {
	var problems []string
	seen := map[string]bool{}
	for _, s := range p.steps[v] {
		if len(s.From) == 0 || s.Kind != Split && s.To == "" || slices.Contains(s.From, "") {
			problems = append(problems, fmt.Sprintf("version %d: a %s names no state", v, s.Kind))
			continue
		}
		for _, from := range s.From {
			if seen[from] {
				problems = append(problems, fmt.Sprintf("version %d: state %s is migrated twice", v, from))
			}
			seen[from] = true
			if v == p.Current && declared(from) {
				problems = append(problems, fmt.Sprintf("version %d: state %s is still declared, so its objects need no %s", v, from, s.Kind))
			}
		}
		if s.Kind == Split {
			continue
		}
		// Where the target leads by the later versions' steps; a split on
		// the way is checked when it picks.
		if to, ok := p.follow(v, s.To); ok && !declared(to) {
			problems = append(problems, fmt.Sprintf("version %d: %s %s leads to state %s, which the machine does not declare", v, s.Kind, s.From[0], to))
		}
	}
	return problems
}

// follow maps state, as of version v, through the steps of the later
// versions, as far as no split needs an object to pick.
func (p *Plan) follow(v int, state string) (string, bool) {
	for next := v + 1; next <= p.Current; next++ {
		s, ok := p.step(next, state)
		if !ok {
			continue
		}
		if s.Kind == Split {
			return "", false
		}
		state = s.To
	}
	return state, true
}

func (p *Plan) step(v int, state string) (Step, bool) {
	for _, s := range p.steps[v] {
		if slices.Contains(s.From, state) {
			return s, true
		}
	}
	return Step{}, false
}

// Moves reports whether a step after version from moves the objects of
// state; New has checked that it leads to a declared state.
func (p *Plan) Moves(from int, state string) bool {
	for v := from + 1; v <= p.Current; v++ {
		if _, ok := p.step(v, state); ok {
			return true
		}
	}
	return false
}

// Map gives the state, at the current version, of an object recorded in
// state at version from; pick runs a split's function for the object.
func (p *Plan) Map(from int, state string, pick func(i int) string) string {
	if state == "" {
		return state
	}
	for v := from + 1; v <= p.Current; v++ {
		s, ok := p.step(v, state)
		switch {
		case !ok:
		case s.Kind == Split:
			state = pick(s.Pick)
		default:
			state = s.To
		}
	}
	return state
}
