package fsmtest

import (
	"fmt"
	"time"
)

// toNextBackoff moves the fake clock to the end of the operator's next
// backoff after a failure, when the operator waits for nothing else:
// something waits on the clock, no action runs, no write has been made
// for moment, and the walk of every write is recorded. Waits and
// timeouts are left to the scenario, which moves the clock for them in
// the clean run as in the faulty ones.
func (e *Env) toNextBackoff(moment time.Duration) {
	if !e.Clock.HasWaiters() || e.actions.runningAny() || e.api.quietFor(time.Now()) < moment || !e.walksCurrent() {
		return
	}
	if next := e.walks.nextTimer(e.Clock.Now(), true); !next.IsZero() {
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
	next := e.walks.nextTimer(now, false)
	if next.IsZero() {
		return ""
	}
	return fmt.Sprintf("; the operator waits on the fake clock until %v, %v after its time now: move it with e.Clock.Step",
		next.Format(time.TimeOnly), next.Sub(now))
}
