// Package kept declares a machine at version 2, which renamed version 1's
// Booting Starting and added Checking after it, and keeps version 1's
// machine in a test file, as a project does to test the migration from
// it: the kept machine runs the current handlers, which speak version 2's
// graph.
package kept

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Server struct{}

func (*Server) GetName() string { return "server" }

const (
	Pending      fsm.State = "Pending"
	Provisioning fsm.State = "Provisioning"
	Starting     fsm.State = "Starting"
	Checking     fsm.State = "Checking"
	Running      fsm.State = "Running"
	Draining     fsm.State = "Draining"
)

type request = fsm.Request[*Server]

type Op struct{ reprovision bool }

func (o *Op) Machine() *fsm.Machine[*Server] {
	return fsm.New[*Server]("server", fsm.Lifecycle).
		Version(2, fsm.Rename("Booting", Starting)).
		Initial(Pending).
		State(Pending, o.pend, fsm.To(Provisioning)).
		State(Provisioning, o.provision, fsm.To(Starting)).
		State(Starting, o.start, fsm.To(Checking)).
		State(Checking, o.check, fsm.To(Running)).
		State(Running, o.run, fsm.To(Draining)).
		State(Draining, nil, fsm.Final())
}

func (o *Op) pend(context.Context, *request) fsm.Result      { return fsm.Next(Provisioning) }
func (o *Op) provision(context.Context, *request) fsm.Result { return fsm.Next(Starting) }
func (o *Op) start(context.Context, *request) fsm.Result     { return fsm.Next(Checking) }
func (o *Op) check(context.Context, *request) fsm.Result     { return fsm.Next(Running) }

// run still sends a server back to Provisioning, which version 1 allowed
// and version 2 no longer does: an error of version 2, whatever the kept
// machine allows.
func (o *Op) run(context.Context, *request) fsm.Result {
	if o.reprovision {
		return fsm.Next(Provisioning) // want `state Running asks to move to Provisioning, which is not among its exits \[Draining\]; kfsm refuses the transition at run time: to allow it, declare fsm.To\(Draining, Provisioning\) at kept.go:39`
	}
	return fsm.Next(Draining)
}
