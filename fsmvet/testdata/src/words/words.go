// Package words is the machine of TestVetSaysWhatKfsmSays, which also runs
// it with package fsm: kfsm vet and the run time must give the same
// reasons in the same words.
package words

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Gadget struct{ Mode string }

func (*Gadget) GetName() string { return "gadget" }

func Machine() *fsm.Machine[*Gadget] {
	return fsm.New[*Gadget]("refusals", fsm.Lifecycle).
		Initial("Start").
		State("Start", start, fsm.To("Middle")).
		State("Middle", middle, fsm.To("Elsewhere")).
		State("Elsewhere", nil, fsm.Final())
}

func start(_ context.Context, r *fsm.Request[*Gadget]) fsm.Result {
	switch r.Object.Mode {
	case "undeclared":
		return fsm.Next("Nowhere") // want `state Start asks to move to Nowhere, but no state Nowhere is declared; its exits are \[Middle\]`
	case "typo":
		return fsm.Next("Midle") // want `no state Midle is declared \(did you mean Middle\?\)`
	case "events":
		return fsm.Next("Middle", "Nowhere") // want `state Start raises events \[Middle, Nowhere\]; no state Nowhere is declared`
	case "events-declared":
		return fsm.Next("Middle", "Elsewhere") // want `state Start raises events \[Middle, Elsewhere\]; Elsewhere is not among its exits \[Middle\]`
	case "declared":
		return fsm.Next("Elsewhere") // want `state Start asks to move to Elsewhere, which is not among its exits \[Middle\]`
	}
	return fsm.Next("Middle")
}

func middle(context.Context, *fsm.Request[*Gadget]) fsm.Result {
	return fsm.Next("Elsewhere")
}
