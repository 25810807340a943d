//go:build linux

package effects_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// check holds each gadget of the round, at rest, to the charges that the
// service made for its order, and counts them.
func (r *round) check(gs []v1alpha1.Gadget) {
	r.t.Helper()
	for i := range gs {
		g := &gs[i]
		effects, posts := r.svc.effectsOf(g.Name), r.svc.postsOf(g.Name)
		r.row.runs++
		r.row.effects += len(effects)
		switch {
		case charged(g):
			r.row.charged++
			r.checkCharged(g, effects)
		case stalled(g):
			r.row.stalled++
			r.checkStalled(g, effects)
		default:
			r.violation("%s rests neither Charged nor Stalled: %s", g.Name, describe(g))
		}
		if q := r.svc.questionsOf(g.Name); r.mode.name == "observe" && q == 1 {
			r.violation("%s: the service's one answer about its charges was an error, and kfsm did not ask again", g.Name)
		}
		if r.mode.name == "neither" && posts > 1 {
			r.violation("%s was charged %d times in mode neither, want at most once: the charge ran again blindly", g.Name, posts)
		}
		if g.Name == r.crashed {
			r.checkCrashed(g, effects)
		}
	}
}

// checkCharged: a Charged gadget's order was charged once, and the
// charge's id, the action's outcome, is in its status.
func (r *round) checkCharged(g *v1alpha1.Gadget, effects []effect) {
	r.t.Helper()
	if len(effects) != 1 {
		r.violation("%s is Charged and its order was charged %d times, want once: %v", g.Name, len(effects), effects)
		return
	}
	if g.Status.Note != effects[0].ID {
		r.violation("%s is Charged with note %q, want the charge's id %q: the action's outcome was lost", g.Name, g.Status.Note, effects[0].ID)
	}
	if len(g.Status.Actions) > 0 {
		r.violation("%s is Charged and still records the actions %+v, want none", g.Name, g.Status.Actions)
	}
}

// checkStalled: only an action that declares neither Idempotent nor
// Observe stalls its gadget, and then as indeterminate, its record kept,
// its order charged at most once.
func (r *round) checkStalled(g *v1alpha1.Gadget, effects []effect) {
	r.t.Helper()
	if r.mode.name != "neither" {
		r.violation("%s is Stalled in mode %s, want it Charged: %s", g.Name, r.mode.name, describe(g))
	}
	if len(effects) > 1 {
		r.violation("%s is Stalled and its order was charged %d times, want at most once: %v", g.Name, len(effects), effects)
	}
	if g.Status.Note != "" {
		r.violation("%s is Stalled with note %q, want none", g.Name, g.Status.Note)
	}
	c := meta.FindStatusCondition(g.Status.Conditions, fsm.ConditionStalled)
	if c.Reason != fsm.ReasonActionIndeterminate {
		r.violation("%s is Stalled with reason %s, want %s: %s", g.Name, c.Reason, fsm.ReasonActionIndeterminate, c.Message)
	}
	if len(g.Status.Actions) != 1 || g.Status.Actions[0].Outcome != "" {
		r.violation("%s is Stalled with the action records %+v, want the charge's, without an outcome", g.Name, g.Status.Actions)
		return
	}
	if key := g.Status.Actions[0].Key; !strings.Contains(c.Message, "charge") || !strings.Contains(c.Message, key) {
		r.violation("%s's Stalled message %q names not the action charge and its key %s", g.Name, c.Message, key)
	}
}

// crashedRest is how the gadget at a crash point rests in mode neither,
// and how often its order was charged; with keys or observe it is
// Charged, its order charged once.
var crashedRest = map[string]struct {
	stalled bool
	effects int
}{
	beforeIntent:  {false, 1}, // no intent was written: its charge ran afresh
	afterIntent:   {true, 0},  // the intent was written, the work never began
	beforeEffect:  {true, 0},
	afterEffect:   {true, 1},
	beforeOutcome: {true, 1},
}

func (r *round) checkCrashed(g *v1alpha1.Gadget, effects []effect) {
	r.t.Helper()
	want := crashedRest[r.point]
	if r.mode.name != "neither" {
		want.stalled, want.effects = false, 1
	}
	if stalled(g) != want.stalled || len(effects) != want.effects {
		r.violation("%s, whose charge reached %s, rests with Stalled %t and %d charges, want %t and %d: %s",
			g.Name, r.point, stalled(g), len(effects), want.stalled, want.effects, describe(g))
	}
}

// row is what the rounds of one mode and crash point counted.
type row struct {
	rounds, runs, effects, charged, stalled, violations int
}

// tally collects the rows of the rounds, to report them together.
type tally struct {
	mu   sync.Mutex
	rows map[string]*row // by mode and point
}

// add counts round r. A round that failed without a violation counted,
// as one that could not finish, counts one.
func (s *tally) add(r *round) {
	if r.t.Failed() && r.row.violations == 0 {
		r.row.violations = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows == nil {
		s.rows = map[string]*row{}
	}
	k := r.mode.name + "/" + r.point
	sum := s.rows[k]
	if sum == nil {
		sum = &row{}
		s.rows[k] = sum
	}
	sum.rounds += r.row.rounds
	sum.runs += r.row.runs
	sum.effects += r.row.effects
	sum.charged += r.row.charged
	sum.stalled += r.row.stalled
	sum.violations += r.row.violations
}

// report logs the rows, by mode and crash point, and their total.
func (s *tally) report(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	line := func(m, svc, point string, r row) {
		fmt.Fprintf(&b, "\n  %-8s %-7s %-15s %6d %6d %8d %8d %8d %10d", m, svc, point, r.rounds, r.runs, r.effects, r.charged, r.stalled, r.violations)
	}
	fmt.Fprintf(&b, "\n  %-8s %-7s %-15s %6s %6s %8s %8s %8s %10s", "mode", "service", "point", "rounds", "runs", "effects", "charged", "stalled", "violations")
	var total row
	for _, m := range modes {
		for _, point := range points {
			r, ok := s.rows[m.name+"/"+point]
			if !ok {
				continue
			}
			line(m.name, m.service(), point, *r)
			total.rounds += r.rounds
			total.runs += r.runs
			total.effects += r.effects
			total.charged += r.charged
			total.stalled += r.stalled
			total.violations += r.violations
		}
	}
	line("total", "", "", total)
	t.Logf("effects per mode and crash point (a run is a gadget of a round):%s", b.String())
}
