// Package versions is a machine at version 2 that renamed a state of
// version 1 and dropped another with no migration for its objects.
package versions

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Moose struct{}

func (*Moose) GetName() string { return "moose" }

const (
	Tagged   fsm.State = "Tagged"
	Roaming  fsm.State = "Roaming"
	Eating   fsm.State = "Eating"
	Grazing  fsm.State = "Grazing"
	Sleeping fsm.State = "Sleeping"
)

type request = fsm.Request[*Moose]

func Machine() *fsm.Machine[*Moose] {
	return fsm.New[*Moose]("moose", fsm.Lifecycle). // want `machine moose strands the objects of state Sleeping of version 1: no migration says where they go; declare one, such as Machine.Version\(2, fsm.Rename\("Sleeping", ...\)\), or with fsm.Remove, fsm.Merge or fsm.Split; or, if no release has shipped version 1, mark the lock "unreleased": true, and its graph may change freely until it is released \(the graphs released are in moose.graph.lock.json\)`
							Version(2, fsm.Rename(Eating, Grazing)).
							Initial(Tagged).
							State(Tagged, tag, fsm.To(Roaming)).
							State(Roaming, roam, fsm.To(Grazing)).
							State(Grazing, graze, fsm.To(Roaming))
}

func tag(context.Context, *request) fsm.Result   { return fsm.Next(Roaming) }
func roam(context.Context, *request) fsm.Result  { return fsm.Next(Grazing) }
func graze(context.Context, *request) fsm.Result { return fsm.Next(Roaming) }
