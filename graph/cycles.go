package graph

import (
	"fmt"
	"iter"
	"slices"
	"strings"
)

// components returns the strongly connected components of the graph that
// next draws on nodes, which are in declaration order: each component
// with its states in that order, the components in the order of their
// first state. Edges to states outside nodes are ignored.
func components(nodes []State, next func(State) []State) [][]State {
	pos := make(map[State]int, len(nodes))
	for i, s := range nodes {
		pos[s] = i
	}
	// Tarjan's algorithm.
	index := map[State]int{}
	low := map[State]int{}
	onStack := map[State]bool{}
	var stack []State
	var comps [][]State
	var visit func(s State)
	visit = func(s State) {
		index[s], low[s] = len(index), len(index)
		stack = append(stack, s)
		onStack[s] = true
		for _, to := range next(s) {
			if _, ok := pos[to]; !ok {
				continue
			}
			if _, seen := index[to]; !seen {
				visit(to)
				low[s] = min(low[s], low[to])
			} else if onStack[to] {
				low[s] = min(low[s], index[to])
			}
		}
		if low[s] != index[s] {
			return
		}
		var comp []State
		for {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[top] = false
			comp = append(comp, top)
			if top == s {
				break
			}
		}
		slices.SortFunc(comp, func(a, b State) int { return pos[a] - pos[b] })
		comps = append(comps, comp)
	}
	for _, s := range nodes {
		if _, seen := index[s]; !seen {
			visit(s)
		}
	}
	slices.SortFunc(comps, func(a, b []State) int { return pos[a[0]] - pos[b[0]] })
	return comps
}

// cycles yields the elementary cycles of the graph that next draws on
// nodes, which are in declaration order, each once: every cycle starts
// at its earliest declared state, and they come in the order of that
// state, then of the exits taken. It is Johnson's algorithm, which
// spends time on cycles found rather than on walks that find none.
func cycles(nodes []State, next func(State) []State) iter.Seq[[]State] {
	return func(yield func([]State) bool) {
		for i, root := range nodes {
			var comp []State
			for _, cc := range components(nodes[i:], next) {
				if cc[0] == root {
					comp = cc
				}
			}
			if len(comp) == 1 && !slices.Contains(next(root), root) {
				continue
			}
			j := johnson{root: root, in: setOf(comp), next: next, yield: yield,
				blocked: map[State]bool{}, waiting: map[State][]State{}}
			if j.circuit(root); j.stopped {
				return
			}
		}
	}
}

// johnson is the search for the cycles through root in its component.
type johnson struct {
	root    State
	in      map[State]bool
	next    func(State) []State
	yield   func([]State) bool
	stopped bool
	stack   []State
	blocked map[State]bool
	// waiting holds, for a blocked state, the states to unblock with it.
	waiting map[State][]State
}

func (j *johnson) circuit(v State) bool {
	found := false
	j.stack = append(j.stack, v)
	j.blocked[v] = true
	for _, w := range j.next(v) {
		switch {
		case j.stopped || !j.in[w]:
		case w == j.root:
			found = true
			j.stopped = !j.yield(slices.Clone(j.stack))
		case !j.blocked[w]:
			found = j.circuit(w) || found
		}
	}
	if found {
		j.unblock(v)
	} else {
		for _, w := range j.next(v) {
			if j.in[w] && !slices.Contains(j.waiting[w], v) {
				j.waiting[w] = append(j.waiting[w], v)
			}
		}
	}
	j.stack = j.stack[:len(j.stack)-1]
	return found
}

func (j *johnson) unblock(v State) {
	j.blocked[v] = false
	waiting := j.waiting[v]
	j.waiting[v] = nil
	for _, w := range waiting {
		if j.blocked[w] {
			j.unblock(w)
		}
	}
}

// timerTargets returns where s's timeout and retries edges lead: the
// moves that kfsm makes by itself.
func (c *checker) timerTargets(s State) []State {
	var to []State
	for _, e := range c.out[s] {
		if e.Kind != Exit && !slices.Contains(to, e.To) {
			to = append(to, e.To)
		}
	}
	return to
}

// unboundedCycles reports the cycles of timeout and retries edges, then
// the cycles of the deletion path that no such edge leaves. A cycle
// within a trap already reported is left out: the trap's finding shows a
// loop in it, and every trap of timeouts or of the deletion path holds
// such a cycle.
func (c *checker) unboundedCycles() {
	live, deletion := c.reach(c.initial), c.reach(c.onDelete)
	var reached, deleting []State
	for _, s := range c.order {
		if live[s] || deletion[s] {
			reached = append(reached, s)
		}
		if deletion[s] {
			deleting = append(deleting, s)
		}
	}
	seen := map[string]bool{}
	inTrap := map[State]bool{}
	for _, f := range c.findings {
		for _, s := range f.States {
			inTrap[s] = true
		}
	}
	trapped := func(cycle []State) bool {
		return !slices.ContainsFunc(cycle, func(s State) bool { return !inTrap[s] })
	}
	n := 0
	for cycle := range cycles(reached, c.timerTargets) {
		if n++; n > maxCycles {
			break
		}
		seen[cycleKey(cycle)] = true
		if trapped(cycle) {
			continue
		}
		byLive := slices.ContainsFunc(cycle, func(s State) bool { return live[s] })
		detail := fmt.Sprintf("kfsm can go round %s for ever by itself: every step is a timeout or retries edge, which kfsm takes without a handler's Next or a change of the object",
			join(append(slices.Clone(cycle), cycle[0]), " -> "))
		c.addCycle(Problem{Code: UnboundedCycle, Detail: detail}, !byLive, cycle, true)
	}
	n = 0
	inDeletion := func(s State) []State {
		return slices.DeleteFunc(c.next(s), func(to State) bool { return !deletion[to] })
	}
	for cycle := range cycles(deleting, inDeletion) {
		if n++; n > maxCycles {
			break
		}
		on := setOf(cycle)
		escapes := slices.ContainsFunc(cycle, func(s State) bool {
			return slices.ContainsFunc(c.timerTargets(s), func(to State) bool { return !on[to] })
		})
		if escapes || seen[cycleKey(cycle)] || trapped(cycle) {
			continue
		}
		detail := fmt.Sprintf("a deleted object can go round %s for ever: it is on the deletion path, where no change of the object comes to end it, "+
			"and no state on it has a timeout or retries edge that leaves it", join(append(slices.Clone(cycle), cycle[0]), " -> "))
		c.addCycle(Problem{Code: UnboundedCycle, Detail: detail}, true, cycle, false)
	}
}

// addCycle records a finding about cycle: the walk to the state of the
// cycle nearest to where it starts, then round the cycle from there, by
// its timeout and retries edges when timers is set.
func (c *checker) addCycle(p Problem, deleting bool, cycle []State, timers bool) {
	start := c.initial
	if deleting {
		start = c.onDelete
	}
	on := setOf(cycle)
	path, ok := c.shortest(start, func(s State) bool { return on[s] }, anyEdge, false)
	if !ok {
		return
	}
	entry := states(start, path)[len(path)]
	i := slices.Index(cycle, entry)
	loop := append(slices.Clone(cycle[i:]), cycle[:i]...)
	steps := path
	for k, from := range loop {
		steps = append(steps, c.step(from, loop[(k+1)%len(loop)], timers))
	}
	p.States = loop
	c.findings = append(c.findings, Finding{Problem: p, Deleting: deleting, Path: states(start, path), Loop: loop, Steps: steps})
}

// step returns the edge from one state to another: the first declared,
// or with timers the first timeout or retries edge.
func (c *checker) step(from, to State, timers bool) Edge {
	for _, e := range c.out[from] {
		if e.To == to && (!timers || e.Kind != Exit) {
			return e
		}
	}
	return Edge{From: from, To: to}
}

// cycleKey names a cycle that starts at its earliest declared state.
func cycleKey(cycle []State) string {
	parts := make([]string, len(cycle))
	for i, s := range cycle {
		parts[i] = string(s)
	}
	return strings.Join(parts, "\x00")
}
