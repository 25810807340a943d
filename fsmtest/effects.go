package fsmtest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// Effects counts what a run did outside the cluster, such as the backups
// a service took or the charges it made, by name: count reads them from
// the fake of that service, for the objects of e's namespace. Faults and
// Explore count once the scenario ended and the operator was quiet, and
// a faulty run must count what the clean run counted: a fault may delay
// an effect, never repeat or lose it. Explore counts again after its
// resync at rest, which must cause none.
//
// Effects is for what no snapshot shows: an effect that the operator
// records nowhere in the cluster, or records after it happened.
func Effects(count func(e *Env) map[string]int) FaultOption {
	return func(o *faultOptions) { o.effects = count }
}

// countEffects counts the run's effects once the operator is quiet.
func (s *snapshots) countEffects(e *Env) {
	if s.effects == nil {
		return
	}
	s.countedBusy = s.quiet(e)
	s.counted = s.effects(e)
}

// compareEffects fails t where the run's effects differ from the clean
// run's.
func (s *snapshots) compareEffects(t testing.TB) {
	t.Helper()
	if s.effects == nil || s.clean == nil {
		return
	}
	if diff := effectsDiff(s.clean.counted, s.counted, "in the clean run", "in this one"); diff != "" {
		if s.countedBusy != "" {
			diff += " (counted when the operator was still busy: " + s.countedBusy + ")"
		}
		t.Errorf("%s: the effects outside the cluster differ from the clean run: %s. A fault may delay an effect, never "+
			"repeat or lose it: is it made outside an action, or by an action that says it is Idempotent?", s.point, diff)
	}
}

// effectsAtRest fails t if the resync at rest caused an effect.
func (s *snapshots) effectsAtRest(e *Env) {
	if s.effects == nil {
		return
	}
	if diff := effectsDiff(s.counted, s.effects(e), "before", "after"); diff != "" {
		e.T.Errorf("fsmtest: %snot at rest (eventual stable reconciliation): a resync (a new operator process, which "+
			"reads every object anew) caused effects outside the cluster, with nothing changed: %s", s.faultPoint(), diff)
	}
}

// effectsDiff says which counts of got differ from want, as "name: 1 in
// the clean run, 2 in this one" with the labels given, or "" when none
// does.
func effectsDiff(want, got map[string]int, wantLabel, gotLabel string) string {
	all := map[string]int{}
	maps.Copy(all, want)
	maps.Copy(all, got)
	var out []string
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if want[name] != got[name] {
			out = append(out, fmt.Sprintf("%s: %d %s, %d %s", name, want[name], wantLabel, got[name], gotLabel))
		}
	}
	return strings.Join(out, "; ")
}
