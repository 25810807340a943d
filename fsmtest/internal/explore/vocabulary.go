// Package explore holds the mechanisms of fsmtest's Explore that know
// nothing of an operator: the vocabulary of faults a schedule is written
// in, the tracker that records where in a run each fault may strike and
// what the world was there, and what two correct runs may differ in.
// fsmtest runs the operator, strikes the faults and checks the oracles.
package explore

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Atom is one fault of a schedule, at a point of the run: a write, a
// watch event, the start or end of an action, a call to an outside
// system, or a change of the scenario's, each counted from 1 in the run.
type Atom struct {
	Kind Kind
	N    int
	Res  string // the object of a write (RESOURCE/NAME), the resource of a watch event, or the name of a drift
}

// Kind is a kind of fault.
type Kind string

// The faults that Explore combines.
const (
	Crash       Kind = "crash"        // the process dies once write N to the object Res is answered
	Fail        Kind = "fail"         // write N to Res fails before it reaches the server
	Conflict    Kind = "conflict"     // write N to Res is answered 409 Conflict
	Clock       Kind = "clock"        // once the scenario's step N, an Await, held, the fake clock jumps past the operator's next timer
	Delay       Kind = "delay"        // watch event N of Res reaches the operator late, and those after it on its watch
	Relist      Kind = "relist"       // the watch of Res breaks at its event N, which is lost; the cache lists anew
	ActionStart Kind = "action-start" // the process dies as the work of action N starts
	ActionEnd   Kind = "action-end"   // the process dies as the work of action N returns, before its outcome is written
	CallFail    Kind = "call-fail"    // call N to an outside system fails before its effect
	CallLost    Kind = "call-lost"    // call N makes its effect, and its answer is lost
	CallTimeout Kind = "call-timeout" // call N makes its effect, and its caller times out
	Drift       Kind = "drift"        // an outside system makes its drift Res, behind the operator, just before the scenario's change N
	Lag         Kind = "lag"          // every watch event reaches the operator late
	Burst       Kind = "burst"        // the operator starts once the scenario made its last change but one
)

// kind is what Explore knows of a kind of fault that strikes at a
// numbered point of the run: the one vocabulary of those faults.
type kind struct {
	// class is the class of fsmtest.Faults the kind belongs to (a
	// fsmtest.Fault); none for the kinds that Explore alone strikes.
	class string
	// what says what the fault did, with the point's number and what
	// happened there; a drift's name comes third.
	what string
	// named: the atom names a resource or a drift, as kind:NAME:N.
	named bool
}

// kinds is the vocabulary of faults at points of the run. A new kind is
// added here once, and Explore strikes it at every point of a run that
// lists it (Faults too, if it has a class).
var kinds = map[Kind]kind{
	Crash:       {class: "crash", what: "crash after the object's write %d (%s)", named: true},
	Fail:        {class: "fail-write", what: "the object's write %d (%s) failed before reaching the server", named: true},
	Conflict:    {class: "conflicts", what: "the object's write %d (%s) answered 409 Conflict", named: true},
	Clock:       {what: "the fake clock jumped past the operator's next timer once step %d (%s) held"},
	Delay:       {what: "watch event %d (%s) and those after it late", named: true},
	Relist:      {what: "watch broken at event %d (%s), which was lost, and the cache listed anew", named: true},
	ActionStart: {class: "crash-in-action", what: "crash as the work of action %d (%s) starts"},
	ActionEnd:   {class: "crash-in-action", what: "crash as the work of action %d (%s) returns, before its outcome is written"},
	CallFail:    {class: "outside-failures", what: "call %d (%s) failed before its effect"},
	CallLost:    {class: "outside-failures", what: "call %d (%s) made its effect, and its answer was lost"},
	CallTimeout: {class: "outside-failures", what: "call %d (%s) made its effect, and its caller timed out"},
	Drift:       {class: "drift", what: "before the scenario's change %d (%s), an outside system made its drift %s behind the operator", named: true},
}

// Kinds are every kind of fault, in the order of the list above.
var Kinds = []Kind{Crash, Fail, Conflict, Clock, Delay, Relist, ActionStart, ActionEnd, CallFail, CallLost, CallTimeout, Drift, Lag, Burst}

// Class is the class of fsmtest.Faults that k belongs to, as its
// fsmtest.Fault names it, or "" for a kind that Explore alone strikes.
func (k Kind) Class() string {
	switch k {
	case Lag:
		return "stale-reads"
	case Burst:
		return "bursts"
	}
	return kinds[k].class
}

func (a Atom) String() string {
	switch {
	case a.Kind == Lag || a.Kind == Burst:
		return string(a.Kind)
	case a.Res != "":
		return fmt.Sprintf("%s:%s:%d", a.Kind, a.Res, a.N)
	}
	return fmt.Sprintf("%s:%d", a.Kind, a.N)
}

// Describe says what a does, at the point of the run it struck, with
// every watch event lag late under a lag.
func (a Atom) Describe(at string, lag time.Duration) string {
	switch a.Kind {
	case Lag:
		return fmt.Sprintf("every watch event %v late", lag)
	case Burst:
		return "the operator stopped until the scenario's last change before deleting: a burst of changes seen as one"
	}
	if at == "" {
		at = "not reached"
	}
	if a.Kind == Drift {
		return fmt.Sprintf(kinds[a.Kind].what, a.N, at, a.Res)
	}
	return fmt.Sprintf(kinds[a.Kind].what, a.N, at)
}

// Schedule is a set of faults, in the order they strike.
type Schedule []Atom

func (s Schedule) String() string {
	parts := make([]string, len(s))
	for i, a := range s {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",")
}

// Parse reads a schedule as Schedule.String writes it, for
// -kfsm.explore.
func Parse(text string) (Schedule, error) {
	var s Schedule
	for part := range strings.SplitSeq(text, ",") {
		fields := strings.Split(strings.TrimSpace(part), ":")
		a := Atom{Kind: Kind(fields[0])}
		k, known := kinds[a.Kind]
		var err error
		switch {
		case (a.Kind == Lag || a.Kind == Burst) && len(fields) == 1:
		case known && k.named && len(fields) == 3 && fields[1] != "":
			a.Res = fields[1]
			a.N, err = strconv.Atoi(fields[2])
		case known && !k.named && len(fields) == 2:
			a.N, err = strconv.Atoi(fields[1])
		default:
			return nil, fmt.Errorf("fsmtest: fault %q: want crash:RESOURCE/NAME:N, fail:RESOURCE/NAME:N, conflict:RESOURCE/NAME:N, clock:N, delay:RESOURCE:N, relist:RESOURCE:N, action-start:N, action-end:N, call-fail:N, call-lost:N, call-timeout:N, drift:NAME:N, lag or burst", part)
		}
		if err != nil || (len(fields) > 1 && a.N < 1) {
			return nil, fmt.Errorf("fsmtest: fault %q: the number must be a count from 1", part)
		}
		s = append(s, a)
	}
	return s, nil
}

// Subsets returns the parts of s with size faults, in order.
func Subsets(s Schedule, size int) []Schedule {
	if size == 0 {
		return []Schedule{nil}
	}
	var out []Schedule
	for i := range s {
		for _, rest := range Subsets(s[i+1:], size-1) {
			out = append(out, append(Schedule{s[i]}, rest...))
		}
	}
	return out
}
