// Package dynamic computes its targets at run time: the analysis skips
// what it cannot resolve and reports nothing.
package dynamic

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type DB struct{ Stop, Service bool }

func (*DB) GetName() string { return "db" }

const (
	Start     fsm.State = "Start"
	Running   fsm.State = "Running"
	Servicing fsm.State = "Servicing"
	Stopping  fsm.State = "Stopping"
	End       fsm.State = "End"
)

type request = fsm.Request[*DB]

type Op struct{ next fsm.State }

func (o *Op) Machine() *fsm.Machine[*DB] {
	exits := []fsm.State{Servicing, End}
	return fsm.New[*DB]("dynamic", fsm.Lifecycle).
		Initial(Start).
		State(Start, o.start, fsm.To(Running)).
		State(Running, o.running, fsm.To(Servicing, Stopping)).
		State(Servicing, o.servicing, fsm.To(Running, End)).
		State(Stopping, o.stopping, fsm.To(exits...)).
		State(End, o.end, fsm.Final()).
		Goal(func(db *DB) fsm.State { return End })
}

func (o *Op) start(context.Context, *request) fsm.Result {
	return fsm.Next(o.next)
}

// running raises events it collects at run time.
func (o *Op) running(_ context.Context, r *request) fsm.Result {
	var events []fsm.State
	if r.Object.Service {
		events = append(events, Servicing)
	}
	if r.Object.Stop {
		events = append(events, fsm.Default)
	}
	if len(events) == 0 {
		return fsm.Done()
	}
	return fsm.Next(events[0], events[1:]...)
}

func (o *Op) servicing(_ context.Context, r *request) fsm.Result {
	return fsm.Next(r.NextHop)
}

// stopping's exits are not constant: nothing is known of them.
func (o *Op) stopping(context.Context, *request) fsm.Result {
	return fsm.Next(Start)
}

func (o *Op) end(_ context.Context, r *request) fsm.Result {
	return o.outside(r)
}

// outside is a function value: what it returns is unknown.
var outsideFn = func(*request) fsm.Result { return fsm.Next("Anywhere") }

func (o *Op) outside(r *request) fsm.Result { return outsideFn(r) }
