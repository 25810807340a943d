package fsmtest

import (
	"context"
	"errors"
	"fmt"
)

// The errors that Outside.Call returns where a fault strikes a call. The
// fake turns each into its protocol's answer: ErrUnavailable into a 503,
// ErrAnswerLost into a 500, ErrTimedOut into a connection closed without
// an answer, as a caller's timeout sees it.
var (
	// ErrUnavailable: the call failed before its effect.
	ErrUnavailable = errors.New("fsmtest: the outside system was unavailable, and the call made no effect")
	// ErrAnswerLost: the call made its effect, and its answer was lost.
	ErrAnswerLost = errors.New("fsmtest: the call made its effect, and its answer was lost")
	// ErrTimedOut: the call made its effect, and its caller timed out
	// before the answer; it wraps context.DeadlineExceeded.
	ErrTimedOut = fmt.Errorf("fsmtest: the call made its effect, and its caller timed out before the answer: %w", context.DeadlineExceeded)
)

// Outside is a system outside the cluster that the operator calls, such
// as a cloud's API, as the test's fake of it declares it: the fake makes
// each effect through Call, where Faults and Explore make calls fail
// before their effect, or lose their answer after it, or time out after
// it. Those are the failures that an action's key and its Observe exist
// for: count the fake's effects with Effects, and a fault may delay an
// effect, never repeat or lose it.
//
// Outside the fault-injection runs, Call only makes the effect.
type Outside struct {
	e    *Env
	name string
}

// Outside declares the system name, for the faults of the run. Declare
// each system once per Env, in the function that makes the machine or
// the fake.
func (e *Env) Outside(name string) *Outside { return &Outside{e: e, name: name} }

// Call makes the effect of one call of op, such as "create", unless a
// fault strikes it first: it returns ErrUnavailable without calling
// effect, or calls effect and then returns ErrAnswerLost or ErrTimedOut
// in place of its answer. Otherwise it returns what effect returned.
// Calls are numbered from 1 across the run, in the order they arrive.
func (o *Outside) Call(op string, effect func() error) error {
	n, f := int(o.e.calls.Add(1)), o.e.faults
	if f == nil {
		return effect()
	}
	seq := f.trace.call(n, o.name, op)
	if f.strikes(atom{Kind: atomCallFail, N: n}, seq) {
		return fmt.Errorf("%s %s: %w", o.name, op, ErrUnavailable)
	}
	err := effect()
	switch {
	case err != nil:
		return err
	case f.strikes(atom{Kind: atomCallLost, N: n}, seq):
		return fmt.Errorf("%s %s: %w", o.name, op, ErrAnswerLost)
	case f.strikes(atom{Kind: atomCallTimeout, N: n}, seq):
		return fmt.Errorf("%s %s: %w", o.name, op, ErrTimedOut)
	}
	return nil
}
