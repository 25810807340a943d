// Package pipeline is a web app pipeline: every reconcile starts from the
// initial state, the last state is final without a handler, and nothing
// is to report.
package pipeline

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type WebApp struct{ Expose bool }

func (*WebApp) GetName() string { return "webapp" }

const (
	Validated    fsm.State = "Validated"
	Configured   fsm.State = "Configured"
	Exposed      fsm.State = "Exposed"
	Serving      fsm.State = "Serving"
	Deregistered fsm.State = "Deregistered"
)

type request = fsm.Request[*WebApp]

type Operator struct{}

func (o *Operator) Machine() *fsm.Machine[*WebApp] {
	return fsm.New[*WebApp]("webapp", fsm.Pipeline).
		Initial(Validated).
		State(Validated, o.validate, fsm.To(Configured)).
		State(Configured, o.configure, fsm.To(Exposed)).
		State(Exposed, o.expose, fsm.To(Serving)).
		State(Serving, nil, fsm.Final()).
		OnDelete(Deregistered).
		State(Deregistered, o.deregister, fsm.Final())
}

func (o *Operator) validate(context.Context, *request) fsm.Result {
	return fsm.Next(Configured)
}

func (o *Operator) configure(context.Context, *request) fsm.Result {
	return fsm.Next(Exposed)
}

func (o *Operator) expose(_ context.Context, r *request) fsm.Result {
	if !r.Object.Expose {
		return fsm.Next(Serving)
	}
	return fsm.Next(Serving)
}

func (o *Operator) deregister(context.Context, *request) fsm.Result {
	return fsm.Done()
}
