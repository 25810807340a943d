package kept

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

// versionOne is the machine as version 1 shipped, kept to test the
// migration from it: it registers the current handlers, directly or
// wrapped, and one of its own.
func (o *Op) versionOne() *fsm.Machine[*Server] {
	const booting fsm.State = "Booting"
	pend := func(context.Context, *request) fsm.Result {
		return fsm.Next(Starting) // want `state Pending asks to move to Starting, but no state Starting is declared; its exits are \[Provisioning\]$`
	}
	return fsm.New[*Server]("server", fsm.Lifecycle).
		Initial(Pending).
		State(Pending, pend, fsm.To(Provisioning)).
		State(Provisioning, o.provision, fsm.To(booting)).                                                            // want `machine server as kept at version 1 refuses a Next of version 2's code at kept.go:44: state Provisioning asks to move to Starting, but no state Starting is declared; its exits are \[Booting\]; version 2 moves the objects of Booting to Starting: a handler of the test's that returns Next\(booting\) takes that exit, as version 1's did`
		State(booting, func(ctx context.Context, r *request) fsm.Result { return o.start(ctx, r) }, fsm.To(Running)). // want `machine server as kept at version 1 refuses a Next of version 2's code at kept.go:45: state Booting asks to move to Checking, but no state Checking is declared; its exits are \[Running\]; a handler of the test's that returns one of its exits moves objects on from there, as version 1's did`
		State(Running, o.run, fsm.To(Provisioning, Draining)).
		State(Draining, nil, fsm.Final())
}

// probe is a machine of the tests' own, not an earlier version: what it
// refuses is an error, reported where the test registers the handler.
func (o *Op) probe() *fsm.Machine[*Server] {
	return fsm.New[*Server]("probe", fsm.Lifecycle).
		Initial(Running).
		State(Running, o.run, fsm.To(Draining)). // want `state Running asks to move to Provisioning, but no state Provisioning is declared; its exits are \[Draining\]; the Next is at kept.go:53$`
		State(Draining, nil, fsm.Final())
}
