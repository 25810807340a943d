// Package refusal says why kfsm refuses a transition, in the words that
// both the run-time refusal (package fsm) and kfsm vet (package fsmvet),
// which finds the refusal before the code runs, use: the run time tells
// the past, vet the present.
package refusal

import (
	"fmt"
	"strings"
)

// Tense is the tense of a refusal: the run time reports what a handler
// did, vet what a handler does.
type Tense int

const (
	// Past: "state A asked to move to B".
	Past Tense = iota
	// Present: "state A asks to move to B".
	Present
)

// Why says why a Next from state with the given events is refused, bad
// being the first event that names no exit: it is not among the state's
// exits, or, when undeclared, no state of that name is declared; closest
// is then the declared name nearest to bad, for a typo ("" for none).
func Why[S ~string](tense Tense, state S, events []S, bad S, exits []S, undeclared bool, closest S) string {
	asked, raised := "asked", "raised"
	if tense == Present {
		asked, raised = "asks", "raises"
	}
	var b strings.Builder
	if len(events) > 1 {
		fmt.Fprintf(&b, "state %s %s events [%s]; ", state, raised, Join(events))
	} else {
		fmt.Fprintf(&b, "state %s %s to move to %s, ", state, asked, bad)
	}
	switch {
	case undeclared && len(events) > 1:
		fmt.Fprintf(&b, "no state %s is declared", bad)
	case undeclared:
		fmt.Fprintf(&b, "but no state %s is declared", bad)
	case len(events) > 1:
		fmt.Fprintf(&b, "%s is not among its exits [%s]", bad, Join(exits))
		return b.String()
	default:
		fmt.Fprintf(&b, "which is not among its exits [%s]", Join(exits))
		return b.String()
	}
	if closest != "" {
		fmt.Fprintf(&b, " (did you mean %s?)", closest)
	}
	fmt.Fprintf(&b, "; its exits are [%s]", Join(exits))
	return b.String()
}

// Join lists states by name, separated by commas, as the refusals do.
func Join[S ~string](states []S) string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
