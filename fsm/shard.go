package fsm

import "github.com/kfsm/kfsm/fsm/sharding"

// Sharded makes the machine run on every replica of s, each reconciling
// the objects of the hash slots it holds; see [sharding.Shards]. The
// machine's controller then needs no leader election, and WithOptions may
// not ask for it.
func (m *Machine[T]) Sharded(s *sharding.Shards) *Machine[T] {
	m.shards = s
	return m
}
