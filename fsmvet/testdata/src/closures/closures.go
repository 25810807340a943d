// Package closures declares handlers as function literals, a function, a
// variable and a function that makes handlers.
package closures

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Job struct{}

func (*Job) GetName() string { return "job" }

const (
	Start    fsm.State = "Start"
	Checking fsm.State = "Checking"
	Running  fsm.State = "Running"
	Stopped  fsm.State = "Stopped"
	Failed   fsm.State = "Failed"
)

type request = fsm.Request[*Job]

func Machine() *fsm.Machine[*Job] {
	check := func(_ context.Context, r *request) fsm.Result {
		if r.Attempt > 3 {
			return fsm.Next(Failed) // want `state Checking asks to move to Failed, which is not among its exits \[Running\]`
		}
		return fsm.Next(Running)
	}
	var stop fsm.Handler[*Job] = stopping
	return fsm.New[*Job]("closures", fsm.Lifecycle).
		Initial(Start).
		State(Start, func(_ context.Context, r *request) fsm.Result {
			if r.Attempt > 1 {
				return fsm.Next(Stopped) // want `state Start asks to move to Stopped, which is not among its exits \[Checking\]; kfsm refuses the transition at run time: to allow it, declare fsm.To\(Checking, Stopped\) at closures.go:40`
			}
			return fsm.Next(Checking)
		}, fsm.To(Checking)).
		State(Checking, check, fsm.To(Running)).
		State(Running, moveTo(Stopped), fsm.To(Stopped, Failed)).
		State(Stopped, stop, fsm.To(Start, Failed)). // want `state Stopped has an exit to Failed that its handler stop never takes`
		State(Failed, fsm.Handler[*Job](failed), fsm.Final())
}

// moveTo makes a handler whose target is its argument: the analysis
// cannot tell which, and reports nothing about it.
func moveTo(s fsm.State) fsm.Handler[*Job] {
	return func(context.Context, *request) fsm.Result { return fsm.Next(s) }
}

func stopping(context.Context, *request) fsm.Result {
	return fsm.Next(Start)
}

func failed(context.Context, *request) fsm.Result {
	return fsm.Next(Start) // want `state Failed asks to move to Start, which is not among its exits \[\]; kfsm refuses the transition at run time: to allow it, add fsm.To\(Start\) to state Failed at closures.go:44`
}
