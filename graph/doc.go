// Package graph is the pure model of a state machine's graph: states, their
// ordered exits, the initial state, final states, the deletion path, and the
// timeout and retries edges that keep objects from getting stuck.
//
// A Graph is data. Validate checks it and reports every problem at once;
// DOT, Mermaid and JSON draw it, deterministically, so that a graph can be
// read, diffed and reviewed like code. See the examples. ParseJSON reads
// the JSON back, for tools that have the export and not the code; the
// edges that tests can cover are CoverageEdges, and MermaidCoverage and
// DOTCoverage mark those that no test took.
//
// Check goes further than Validate: it treats every handler as a choice
// among what it may return, adds the timeouts, retries and the deletion
// entry that kfsm takes by itself, and proves that no object can fall
// into a trap, a deletion path that never ends, a cycle that kfsm repeats
// for ever or a state from which a goal cannot be reached; or it gives
// each finding's counterexample, which MermaidFinding draws and Scenario
// turns into the skeleton of an fsmtest test.
//
// The package has no Kubernetes dependency.
package graph
