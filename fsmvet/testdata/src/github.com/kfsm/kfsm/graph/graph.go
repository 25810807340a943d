// Package graph stands in for kfsm's graph package in the analyzer's
// tests: the declarations that package fsm's stand-in refers to.
package graph

// Mode says how a machine runs its graph.
type Mode int

const (
	Lifecycle Mode = iota
	Pipeline
)
