// Package escape passes its machine to code outside the package, which
// may declare states: the analysis no longer says that a state is not
// declared, nor that one is dead.
package escape

import (
	"context"

	"github.com/kfsm/kfsm/fsm"
	"other"
)

type Doc struct{}

func (*Doc) GetName() string { return "doc" }

type request = fsm.Request[*Doc]

func Machine() *fsm.Machine[*Doc] {
	m := fsm.New[*Doc]("escape", fsm.Lifecycle).
		Initial("Draft").
		State("Draft", draft, fsm.To("Published")). // want `state Draft has an exit to Published that its handler draft never takes`
		State("Published", nil, fsm.Final()).
		State("Orphan", draft, fsm.To("Published")) // want `state Orphan has an exit to Published that its handler draft never takes`
	other.AddArchive(m)
	return m
}

func draft(context.Context, *request) fsm.Result {
	return fsm.Next("Archived") // want `state Draft asks to move to Archived, which is not among its exits \[Published\]` `state Orphan asks to move to Archived, which is not among its exits \[Published\]`
}

// A stage declares its states on the machine it is given; the analysis
// does not follow calls through an interface.
type stage interface {
	add(m *fsm.Machine[*Doc]) *fsm.Machine[*Doc]
}

type review struct{}

func (review) add(m *fsm.Machine[*Doc]) *fsm.Machine[*Doc] {
	return m.State("Review", nil, fsm.To("Out")).State("Out", nil, fsm.Final())
}

func Staged(s stage) *fsm.Machine[*Doc] {
	m := fsm.New[*Doc]("staged", fsm.Lifecycle).
		Initial("Write").
		State("Write", write, fsm.To("Review"))
	return s.add(m)
}

func write(_ context.Context, r *request) fsm.Result {
	if r.Attempt > 1 {
		return fsm.Next("Out") // want `state Write asks to move to Out, which is not among its exits \[Review\]; kfsm refuses`
	}
	return fsm.Next("Review")
}

var _ stage = review{}
