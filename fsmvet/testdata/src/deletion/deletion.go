// Package deletion moves to its deletion state by Next, from outside the
// deletion path and from a state on it.
package deletion

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Volume struct{}

func (*Volume) GetName() string { return "volume" }

const (
	Attached fsm.State = "Attached"
	Retired  fsm.State = "Retired"
	Deleting fsm.State = "Deleting"
	Draining fsm.State = "Draining"
	Gone     fsm.State = "Gone"
)

type request = fsm.Request[*Volume]

type Op struct{ retire, again bool }

func (o *Op) Machine() *fsm.Machine[*Volume] {
	return fsm.New[*Volume]("volume", fsm.Lifecycle).
		Initial(Attached).
		State(Attached, o.attached, fsm.To(Retired)).
		State(Retired, nil, fsm.Final()).
		OnDelete(Deleting).
		State(Deleting, o.delete, fsm.To(Draining)).
		State(Draining, o.drain, fsm.To(Gone)).
		State(Gone, nil, fsm.Final())
}

// attached asks for the deletion state, which kfsm enters only once the
// object is deleted: no exit makes that right.
func (o *Op) attached(context.Context, *request) fsm.Result {
	if o.retire {
		return fsm.Next(Retired)
	}
	return fsm.Next(Deleting) // want `state Attached asks to move to Deleting, which is not among its exits \[Retired\]; kfsm refuses the transition at run time: to enter the deletion path, delete the object, and kfsm moves it to Deleting by itself$`
}

func (o *Op) delete(context.Context, *request) fsm.Result {
	return fsm.Next(Draining)
}

// drain starts the deletion path again, from a state on it: there an
// exit back to Deleting is the fix.
func (o *Op) drain(context.Context, *request) fsm.Result {
	if o.again {
		return fsm.Next(Deleting) // want `state Draining asks to move to Deleting, which is not among its exits \[Gone\]; kfsm refuses the transition at run time: to allow it, declare fsm.To\(Gone, Deleting\) at deletion.go:34`
	}
	return fsm.Next(Gone)
}
