// Package basic is the moose machine with method values as handlers.
package basic

import (
	"context"
	"errors"
	"time"

	"github.com/kfsm/kfsm/fsm"
)

type Moose struct{}

func (*Moose) GetName() string { return "moose" }

const (
	Tagged   fsm.State = "Tagged"
	Roaming  fsm.State = "Roaming"
	Eating   fsm.State = "Eating"
	Sleeping fsm.State = "Sleeping"
	Lost     fsm.State = "Lost"
	Released fsm.State = "Released"
)

type Herd struct{ hungry, tired bool }

type request = fsm.Request[*Moose]

func (h *Herd) Machine() *fsm.Machine[*Moose] {
	return fsm.New[*Moose]("moose", fsm.Lifecycle).
		Initial(Tagged).
		State(Tagged, h.tag, fsm.To(Roaming)).
		State(Roaming, h.roam, fsm.To(Eating, Sleeping), fsm.Timeout(time.Hour, Lost)). // want `state Roaming has an exit to Sleeping that its handler h.roam never takes: no Next it returns leads there`
		State(Eating, h.eat, fsm.To(Roaming)).
		State(Sleeping, h.sleep, fsm.To(Roaming)). // want `state Sleeping is declared but nothing moves there: no handler returns a Next to it, and no initial, timeout, retries or deletion edge leads there`
		State(Lost, h.lost, fsm.Final()).
		OnDelete(Released).
		State(Released, h.release, fsm.Final())
}

func (h *Herd) tag(_ context.Context, r *request) fsm.Result {
	if r.Attempt > 1 {
		return fsm.Next("Roamin") // want `state Tagged asks to move to Roamin, but no state Roamin is declared \(did you mean Roaming\?\); its exits are \[Roaming\]`
	}
	if h.hungry {
		return fsm.Next("Nowhere") // want `state Tagged asks to move to Nowhere, but no state Nowhere is declared; its exits are \[Roaming\]`
	}
	return fsm.Next(Roaming)
}

// roam raises two events; Eating wins, as the exit declared first, so the
// exit to Sleeping is never taken.
func (h *Herd) roam(_ context.Context, r *request) fsm.Result {
	if h.hungry {
		return fsm.Next(Sleeping, Eating)
	}
	return fsm.Wait(time.Minute, "Roaming")
}

func (h *Herd) eat(_ context.Context, r *request) fsm.Result {
	if h.tired {
		return fsm.Next(Sleeping) // want `state Eating asks to move to Sleeping, which is not among its exits \[Roaming\]; kfsm refuses the transition at run time: to allow it, declare fsm.To\(Roaming, Sleeping\) at basic.go:34`
	}
	if h.hungry {
		return fsm.Next(Roaming, Lost) // want `state Eating raises events \[Roaming, Lost\]; Lost is not among its exits \[Roaming\]; kfsm refuses the transition at run time: to allow it, declare fsm.To\(Roaming, Lost\) at basic.go:34`
	}
	return fsm.Next(Roaming)
}

// sleep takes the default exit: the last declared, Roaming.
func (h *Herd) sleep(context.Context, *request) fsm.Result {
	return fsm.Next(fsm.Default)
}

func (h *Herd) lost(context.Context, *request) fsm.Result {
	if h.hungry {
		return fsm.Next(fsm.Default) // want `state Lost asks to move to \(default\), which is not among its exits \[\]; kfsm refuses the transition at run time: Default takes the last declared exit, and there is none; add fsm.To to state Lost at basic.go:36`
	}
	return fsm.Done()
}

func (h *Herd) release(context.Context, *request) fsm.Result {
	if h.tired {
		return fsm.Fail(errors.New("the herd is gone"))
	}
	return fsm.Done()
}
