// Package flags declares a state one way or another, as a flag of the
// operator says, with one handler that branches on the same flag.
package flags

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Service struct{}

func (*Service) GetName() string { return "service" }

const (
	Start   fsm.State = "Start"
	Deploy  fsm.State = "Deploy"
	Check   fsm.State = "Check"
	Migrate fsm.State = "Migrate"
	Upgrade fsm.State = "Upgrade"
	Rename  fsm.State = "Rename"
	Ready   fsm.State = "Ready"
)

type request = fsm.Request[*Service]

type Options struct {
	V2, broken bool
	name       fsm.State
}

// Machine declares Deploy twice, once for each value of V2: a Next of
// deploy is illegal only when neither declaration allows it.
func (o *Options) Machine() *fsm.Machine[*Service] {
	m := fsm.New[*Service]("service", fsm.Lifecycle).
		Initial(Start).
		State(Start, o.start, fsm.To(Deploy))
	if o.V2 {
		m.State(Deploy, o.deploy, fsm.To(Check)).
			State(Check, o.check, fsm.To(Ready))
	} else {
		m.State(Deploy, o.deploy, fsm.To(Ready))
	}
	return m.State(Ready, nil, fsm.Final())
}

func (o *Options) start(context.Context, *request) fsm.Result {
	return fsm.Next(Deploy)
}

func (o *Options) deploy(context.Context, *request) fsm.Result {
	if o.broken {
		return fsm.Next(Start) // want `state Deploy asks to move to Start, which is not among its exits \[Check\]; kfsm refuses the transition at run time: to allow it, declare fsm.To\(Check, Start\) at flags.go:39` `state Deploy asks to move to Start, which is not among its exits \[Ready\]; kfsm refuses the transition at run time: to allow it, declare fsm.To\(Ready, Start\) at flags.go:42`
	}
	if o.V2 {
		return fsm.Next(Check)
	}
	return fsm.Next(Ready)
}

func (o *Options) check(context.Context, *request) fsm.Result {
	return fsm.Next(Ready)
}

// Unread declares its states, under V2, in ways that the analysis cannot
// read: with options of the caller's, a handler that a plugin gives, a
// name that the operator chooses. Each of these declarations may allow
// what the other declaration of its state refuses.
func (o *Options) Unread(p plugin, opts ...fsm.StateOption) *fsm.Machine[*Service] {
	m := fsm.New[*Service]("unread", fsm.Lifecycle).Initial(Migrate)
	if o.V2 {
		m.State(Migrate, o.migrate, opts...).
			State(Upgrade, p.Handler(), fsm.To(Check)).
			State(o.name, o.rename, fsm.To(Check))
	} else {
		m.State(Migrate, o.migrate, fsm.To(Upgrade)).
			State(Upgrade, o.upgrade, fsm.To(Rename)).
			State(Rename, o.rename, fsm.To(Ready))
	}
	return m.State(Check, nil, fsm.Final()).
		State(Ready, nil, fsm.Final())
}

type plugin interface{ Handler() fsm.Handler[*Service] }

func (o *Options) migrate(context.Context, *request) fsm.Result {
	if o.V2 {
		return fsm.Next(Check)
	}
	return fsm.Next(Upgrade)
}

func (o *Options) upgrade(context.Context, *request) fsm.Result {
	if o.V2 {
		return fsm.Next(Check)
	}
	return fsm.Next(Rename)
}

func (o *Options) rename(context.Context, *request) fsm.Result {
	if o.V2 {
		return fsm.Next(Check)
	}
	return fsm.Next(Ready)
}
