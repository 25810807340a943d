package graph

import "slices"

// Path returns the shortest walk from one state to another through the
// declared exits, both ends included, and whether there is one. Among
// walks of the same length it takes the one whose first differing step is
// the earlier declared exit, so that the answer follows the author's
// priorities. Timeout and retries edges are not part of a path: kfsm takes
// them, not handlers. Path(s, s) is [s].
func (g *Graph) Path(from, to State) ([]State, bool) {
	if _, ok := g.Lookup(from); !ok {
		return nil, false
	}
	if _, ok := g.Lookup(to); !ok {
		return nil, false
	}
	exits := make(map[State][]State, len(g.States))
	for _, s := range g.States {
		if _, dup := exits[s.Name]; !dup {
			exits[s.Name] = s.Exits
		}
	}
	// Breadth first, exits in priority order: the first time a state is
	// reached is by a shortest walk, and the highest-priority one.
	parent := map[State]State{from: from}
	queue := []State{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			path := []State{to}
			for s := to; s != from; {
				s = parent[s]
				path = append(path, s)
			}
			slices.Reverse(path)
			return path, true
		}
		for _, next := range exits[cur] {
			if _, seen := parent[next]; !seen {
				parent[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return nil, false
}

// NextHop returns the exit to take from a state towards a goal, and
// whether the goal can be reached at all. At the goal it returns the goal.
func (g *Graph) NextHop(from, goal State) (State, bool) {
	path, ok := g.Path(from, goal)
	if !ok {
		return "", false
	}
	if len(path) == 1 {
		return goal, true
	}
	return path[1], true
}

// Reachable reports whether goal can be reached from a state through the
// declared exits, for example to refuse a desired state at admission.
func (g *Graph) Reachable(from, goal State) bool {
	_, ok := g.Path(from, goal)
	return ok
}
