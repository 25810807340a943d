package shard

import (
	"context"
	"testing"
)

// releasing is a machine whose actions in slot 3 never return, and whose
// actions in slot 5 have returned.
type releasing struct{ stuck, returned chan struct{} }

func (releasing) Gained(context.Context, Slots) {}

func (m releasing) Released(Slots) map[int][]<-chan struct{} {
	return map[int][]<-chan struct{}{3: {m.stuck}, 5: {m.returned}}
}

// A slot whose actions returned is drained, whatever the actions of the
// other slots given up with it do.
func TestASlowActionHoldsBackOnlyItsOwnSlot(t *testing.T) {
	m := releasing{stuck: make(chan struct{}), returned: make(chan struct{})}
	close(m.returned)
	s := &Replica{active: 1<<3 | 1<<5 | 1<<9, machines: []Machine{m}}
	s.stop(1<<3 | 1<<5)
	if got, want := s.drainedOf(1<<3|1<<5), Slots(1<<5); got != want {
		t.Errorf("drained %v, want %v: slot 5's actions returned, slot 3's did not", got, want)
	}
	if !s.active.Has(9) || s.active.Has(3) || s.active.Has(5) {
		t.Errorf("active %v after giving up 3 and 5 of 3, 5 and 9", s.active)
	}
	close(m.stuck)
	if got, want := s.drainedOf(1<<3|1<<5), Slots(1<<3|1<<5); got != want {
		t.Errorf("once slot 3's actions returned, drained %v, want %v", got, want)
	}
}
