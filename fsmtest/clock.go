package fsmtest

import (
	"fmt"
	"time"
)

// toNextTimer moves the fake clock to the operator's next timer when the
// operator waits for nothing else: something waits on the clock, no
// action runs, no write has been made for moment, and the walk of every
// write is recorded.
func (e *Env) toNextTimer(moment time.Duration) {
	if !e.Clock.HasWaiters() || e.actions.runningAny() || e.api.quietFor(time.Now()) < moment || !e.walksCurrent() {
		return
	}
	if next := e.walks.nextTimer(e.Clock.Now()); !next.IsZero() {
		e.Clock.SetTime(next)
	}
}

// clockHint tells, for an Await that gave up, that the operator waits on
// the fake clock, which only the test moves.
func (e *Env) clockHint() string {
	if !e.Clock.HasWaiters() {
		return ""
	}
	now := e.Clock.Now()
	next := e.walks.nextTimer(now)
	if next.IsZero() {
		return ""
	}
	return fmt.Sprintf("; the operator waits on the fake clock until %v, %v after its time now: move it with e.Clock.Step",
		next.Format(time.TimeOnly), next.Sub(now))
}
