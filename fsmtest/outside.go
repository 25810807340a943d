package fsmtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/kfsm/kfsm/fsmtest/internal/explore"
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
// A real system also changes behind the operator's back: a database
// stopped by hand, a DNS record removed, a host that forgets what it
// ran. The fake declares each such change with Drift, and the faults of
// the run make it, once, just before one of the scenario's changes,
// whose reconcile is the operator's next look at the system.
//
// Outside the fault-injection runs, Call only makes the effect, and no
// drift is made.
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
func (o *Outside) Call(op string, effect func() error) error { return o.call(op, effect, false) }

// Read makes one call of op that changes nothing in the system, such as
// a lookup or a health check, unless a fault fails it first with
// ErrUnavailable. A read's answer lost or timed out is a failure to the
// caller as well, and it has no effect to repeat: the faults strike a
// read once, where they strike a Call three times.
func (o *Outside) Read(op string, read func() error) error { return o.call(op, read, true) }

func (o *Outside) call(op string, effect func() error, read bool) error {
	n, f := int(o.e.calls.Add(1)), o.e.faults
	if f == nil {
		return effect()
	}
	seq := f.Trace().Call(n, o.name, op, read)
	if f.Strikes(explore.Atom{Kind: explore.CallFail, N: n}, seq) {
		return fmt.Errorf("%s %s: %w", o.name, op, ErrUnavailable)
	}
	err := effect()
	switch {
	case err != nil:
		return err
	case read:
		// Call N may be a read in this run and a change in the run that
		// made the schedule: calls interleave as their callers' timing
		// goes. A read has no answer to lose after an effect.
	case f.Strikes(explore.Atom{Kind: explore.CallLost, N: n}, seq):
		return fmt.Errorf("%s %s: %w", o.name, op, ErrAnswerLost)
	case f.Strikes(explore.Atom{Kind: explore.CallTimeout, N: n}, seq):
		return fmt.Errorf("%s %s: %w", o.name, op, ErrTimedOut)
	}
	return nil
}

// Transport is the HTTP transport of the operator's client of a fake
// served over HTTP: it sends each request through Call, as the
// operation "METHOD /path" (the test's namespace in the path written
// <namespace>), so that a fault fails it before it reaches the fake, or
// loses its answer, or times it out, after the fake took it; a GET or a
// HEAD, which changes nothing, goes through Read. next sends it; nil is
// http.DefaultTransport.
func (o *Outside) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return outsideTransport{o: o, next: next}
}

type outsideTransport struct {
	o    *Outside
	next http.RoundTripper
}

func (t outsideTransport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	op := req.Method + " " + strings.ReplaceAll(req.URL.Path, t.o.e.Namespace, "<namespace>")
	err = t.o.call(op, func() error {
		var sent error
		resp, sent = t.next.RoundTrip(req) //nolint:bodyclose // the caller closes it, or the failure below does
		return sent
	}, req.Method == http.MethodGet || req.Method == http.MethodHead)
	if err != nil && resp != nil {
		_ = resp.Body.Close() // the answer, lost
		resp = nil
	}
	return resp, err
}

// Drift declares a change that the system makes by itself, behind the
// operator's back, as the real one can: change makes it in the fake, as
// someone who is not the operator would (a database stopped by hand, a
// record removed, a host that forgets an instance). Faults' class Drift,
// and Explore's drift:NAME:N, make it once, just before the scenario's
// change N (its Create, Update or Delete, counted from 1): the reconcile
// of that change is the operator's next look at the system, which must
// bring the system back to what the objects ask, or report that it
// cannot, and take the clean run's snapshots. Outside those runs, no
// drift is made.
//
// name is a word (letters, digits, '-', '_', '.'), unique in the Env,
// that names the drift in a schedule. Declare each drift next to its
// Outside, in the function that makes the machine or the fake; declared
// again by the same system, as a machine function that runs for each
// operator process does, it replaces the first.
func (o *Outside) Drift(name string, change func()) {
	if !driftName.MatchString(name) {
		o.e.T.Fatalf("fsmtest: drift %q of %s: a drift's name is a word of letters, digits, '-', '_' and '.', as in the schedule drift:NAME:3", name, o.name)
	}
	if change == nil {
		o.e.T.Fatalf("fsmtest: drift %q of %s: no change to make", name, o.name)
	}
	if err := o.e.drifts.add(o.name, name, change); err != nil {
		o.e.T.Fatal(err)
	}
}

var driftName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// drifts are the drifts that the outside systems of an Env declared.
type drifts struct {
	mu     sync.Mutex
	system map[string]string // of each drift
	change map[string]func() // by name
}

func (d *drifts) add(system, name string, change func()) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.change == nil {
		d.system, d.change = map[string]string{}, map[string]func(){}
	}
	if s, ok := d.system[name]; ok && s != system {
		return fmt.Errorf("fsmtest: drift %q of %s: %s declared a drift of that name already", name, system, s)
	}
	d.system[name], d.change[name] = system, change
	return nil
}

// all returns the drifts declared so far, by name.
func (d *drifts) all() map[string]func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.change)
}

// drift makes, in a fault-injection run, the drifts that its schedule
// strikes before the scenario's next change, what, and records the
// point for Explore.
func (e *Env) drift(what string) {
	f := e.faults
	if f == nil {
		return
	}
	n := int(e.changes.Add(1))
	drifts := e.drifts.all()
	if len(drifts) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(drifts))
	seq := f.Trace().Drift(n, names, what)
	for _, name := range names {
		if f.Strikes(explore.Atom{Kind: explore.Drift, N: n, Res: name}, seq) {
			drifts[name]()
		}
	}
}
