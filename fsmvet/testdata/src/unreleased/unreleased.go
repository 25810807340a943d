// Package unreleased is a machine that no release has shipped: its lock
// is marked unreleased, so the states it renamed and dropped strand no
// object, and no migration is needed.
package unreleased

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
)

type Moose struct{}

func (*Moose) GetName() string { return "moose" }

const (
	Tagged  fsm.State = "Tagged"
	Roaming fsm.State = "Roaming"
	Grazing fsm.State = "Grazing"
)

type request = fsm.Request[*Moose]

func Machine() *fsm.Machine[*Moose] {
	return fsm.New[*Moose]("moose", fsm.Lifecycle).
		Initial(Tagged).
		State(Tagged, tag, fsm.To(Roaming)).
		State(Roaming, roam, fsm.To(Grazing)).
		State(Grazing, graze, fsm.To(Roaming))
}

func tag(context.Context, *request) fsm.Result   { return fsm.Next(Roaming) }
func roam(context.Context, *request) fsm.Result  { return fsm.Next(Grazing) }
func graze(context.Context, *request) fsm.Result { return fsm.Next(Roaming) }
