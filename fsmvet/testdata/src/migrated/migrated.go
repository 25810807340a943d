// Package migrated has machines whose versions move the objects of every
// state that their lock files keep, one of them with a version that the
// analyzer cannot read.
package migrated

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Moose struct{ Hungry bool }

func (*Moose) GetName() string { return "moose" }

const (
	Tagged   fsm.State = "Tagged"
	Roaming  fsm.State = "Roaming"
	Eating   fsm.State = "Eating"
	Grazing  fsm.State = "Grazing"
	Browsing fsm.State = "Browsing"
	Sleeping fsm.State = "Sleeping"
	Resting  fsm.State = "Resting"
	Napping  fsm.State = "Napping"
	Dozing   fsm.State = "Dozing"
	Lost     fsm.State = "Lost"
)

type request = fsm.Request[*Moose]

// Version 1 had Tagged, Roaming, Eating, Sleeping and Lost; version 2
// split Eating and renamed Sleeping; version 3 merged Napping and Dozing,
// which version 2 had, into Resting, and removed Lost.
func Machine() *fsm.Machine[*Moose] {
	return fsm.New[*Moose]("herd", fsm.Lifecycle).
		Version(2, fsm.Split(Eating, func(m *Moose) fsm.State {
			if m.Hungry {
				return Grazing
			}
			return Browsing
		}), fsm.Rename(Sleeping, Napping)).
		Version(3, fsm.Merge(Resting, Napping, Dozing), fsm.Remove(Lost, Roaming)).
		Initial(Tagged).
		State(Tagged, next(Roaming), fsm.To(Roaming)).
		State(Roaming, next(Grazing), fsm.To(Grazing, Browsing, Resting)).
		State(Grazing, next(Roaming), fsm.To(Roaming)).
		State(Browsing, next(Roaming), fsm.To(Roaming)).
		State(Resting, next(Roaming), fsm.To(Roaming))
}

var version = 2

func Flock() *fsm.Machine[*Moose] {
	return fsm.New[*Moose]("flock", fsm.Lifecycle). // want `machine flock is not checked against flock.graph.lock.json: its states or versions are not all constant, or are declared outside the package`
							Version(version, fsm.Rename(Eating, Grazing)).
							Initial(Tagged).
							State(Tagged, next(Grazing), fsm.To(Grazing)).
							State(Grazing, next(Tagged), fsm.To(Tagged))
}

func next(s fsm.State) fsm.Handler[*Moose] {
	return func(context.Context, *request) fsm.Result { return fsm.Next(s) }
}
