// Package shard spreads the objects of sharded machines over the replicas
// of an operator; it is the work behind package sharding's Shards and New,
// and fsm's Machine.Sharded. A Replica keeps this process's Lease and the hash
// slots it holds (membership.go), by a rule that every replica computes
// alike (slots.go); it makes the cache list and watch only the objects of
// those slots (transport.go) and moves the informers to new slots without
// a list of their own (listwatch.go); metrics.go counts it all.
//
// It knows nothing of machines. A machine's reconciler joins a Replica as
// a Machine, which learns of the slots it gains and releases, and wraps
// each reconcile in Enter and Exit, so that no object is reconciled while
// its slot moves.
package shard
