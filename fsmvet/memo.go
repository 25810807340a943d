package fsmvet

import "math"

// memo computes values by following what flows into what (a variable from
// its assignments, a parameter from its arguments, a result from its
// returns), where the flow may be cyclic: m := f(m). A value is a union
// of what can be reached, so a node met again while it is being computed
// adds nothing; a result that such a cut left incomplete is not kept,
// except at the node where the cycle closed, which is complete.
type memo[T any] struct {
	done  map[any]T
	depth map[any]int // the nodes in progress, by their depth
	stack int
	cut   int // the lowest depth of a node in progress that was met again
}

func newMemo[T any]() *memo[T] {
	return &memo[T]{done: map[any]T{}, depth: map[any]int{}, cut: math.MaxInt}
}

func (m *memo[T]) get(key any, compute func() T) T {
	if v, ok := m.done[key]; ok {
		return v
	}
	if d, ok := m.depth[key]; ok {
		m.cut = min(m.cut, d)
		var empty T
		return empty
	}
	m.stack++
	d := m.stack
	m.depth[key] = d
	outer := m.cut
	m.cut = math.MaxInt
	v := compute()
	delete(m.depth, key)
	m.stack--
	if m.cut >= d {
		m.done[key] = v
	}
	m.cut = min(outer, m.cut)
	return v
}
