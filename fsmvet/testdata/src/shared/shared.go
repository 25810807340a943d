// Package shared reuses handlers for several states.
package shared

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Build struct{}

func (*Build) GetName() string { return "build" }

const (
	Fetch   fsm.State = "Fetch"
	Compile fsm.State = "Compile"
	Test    fsm.State = "Test"
	Publish fsm.State = "Publish"
	Done    fsm.State = "Done"
)

type request = fsm.Request[*Build]

type Op struct{ skip bool }

// Unguarded: step serves Fetch and Compile, whose exits differ.
func (o *Op) Unguarded() *fsm.Machine[*Build] {
	return fsm.New[*Build]("unguarded", fsm.Lifecycle).
		Initial(Fetch).
		State(Fetch, o.step, fsm.To(Compile)).
		State(Compile, o.step, fsm.To(Done)).
		State(Done, nil, fsm.Final())
}

func (o *Op) step(context.Context, *request) fsm.Result {
	if o.skip {
		return fsm.Next(Done) // want `state Fetch asks to move to Done, which is not among its exits \[Compile\]; its handler o.step also serves state Compile, where the move is legal: branch on r.State, or to allow it, declare fsm.To\(Compile, Done\) at shared.go:30`
	}
	return fsm.Next(Compile) // want `state Compile asks to move to Compile, which is not among its exits \[Done\]; its handler o.step also serves state Fetch, where the move is legal`
}

// Guarded: the shared handlers test r.State, so each Next leaves only
// from the state it is legal for.
func (o *Op) Guarded() *fsm.Machine[*Build] {
	return fsm.New[*Build]("guarded", fsm.Lifecycle).
		Initial(Fetch).
		State(Fetch, o.byIf, fsm.To(Compile)).
		State(Compile, o.byIf, fsm.To(Test)).
		State(Test, o.bySwitch, fsm.To(Publish, Done)).
		State(Publish, o.bySwitch, fsm.To(Done)).
		State(Done, o.byEarlyReturn, fsm.To(Fetch, Publish)).
		State(Fetch+"Again", o.byEarlyReturn, fsm.To(Fetch)). // want `state FetchAgain is declared but nothing moves there`
		State(Compile+"Again", o.byVariable, fsm.To(Test)).   // want `state CompileAgain is declared but nothing moves there`
		State(Test+"Again", o.byVariable, fsm.To(Publish))    // want `state TestAgain is declared but nothing moves there`
}

func (o *Op) byIf(_ context.Context, r *request) fsm.Result {
	if r.State == Fetch {
		return fsm.Next(Compile)
	} else if o.skip {
		return fsm.Next(Done) // want `state Compile asks to move to Done, which is not among its exits \[Test\]; kfsm refuses the transition at run time`
	}
	return fsm.Next(Test)
}

func (o *Op) bySwitch(_ context.Context, r *request) fsm.Result {
	switch r.State {
	case Test:
		if o.skip {
			return fsm.Next(Done)
		}
		return fsm.Next(Publish)
	case Publish, Done:
		return fsm.Next(Done)
	default:
		return fsm.Next(Fetch)
	}
}

func (o *Op) byEarlyReturn(_ context.Context, r *request) fsm.Result {
	if r.State != Done {
		return fsm.Next(Fetch)
	}
	if o.skip {
		return fsm.Next(Publish)
	}
	return fsm.Next(Fetch)
}

// byVariable reads r.State through a variable, which the analysis does
// not follow: it reports only what is illegal from every state.
func (o *Op) byVariable(_ context.Context, r *request) fsm.Result {
	s := r.State
	if s == Compile+"Again" {
		return fsm.Next(Test)
	}
	if o.skip {
		return fsm.Next(Done) // want `state CompileAgain asks to move to Done` `state TestAgain asks to move to Done`
	}
	return fsm.Next(Publish)
}

// Nightly and Release register sweep for Fetch with different exits: a
// Next of sweep is checked against each machine, whatever the other
// allows.
func (o *Op) Nightly() *fsm.Machine[*Build] {
	return fsm.New[*Build]("nightly", fsm.Lifecycle).
		Initial(Fetch).
		State(Fetch, o.sweep, fsm.To(Test)).
		State(Test, o.test, fsm.To(Publish)).
		State(Publish, nil, fsm.Final())
}

func (o *Op) Release() *fsm.Machine[*Build] {
	return fsm.New[*Build]("release", fsm.Lifecycle).
		Initial(Fetch).
		State(Fetch, o.sweep, fsm.To(Test, Publish)).
		State(Test, o.test, fsm.To(Publish)).
		State(Publish, nil, fsm.Final())
}

func (o *Op) sweep(context.Context, *request) fsm.Result {
	if o.skip {
		return fsm.Next(Publish) // want `state Fetch asks to move to Publish, which is not among its exits \[Test\]; kfsm refuses the transition at run time: to allow it, declare fsm.To\(Test, Publish\) at shared.go:109`
	}
	return fsm.Next(Test)
}

func (o *Op) test(context.Context, *request) fsm.Result { return fsm.Next(Publish) }
