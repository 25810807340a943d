package explore

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// world is a scenario of a search's tests: a clean run of points, each
// with a crash of its own, and a set of schedules that fail.
type world struct {
	mu     sync.Mutex
	points []Point
	fails  func(Schedule) bool
	ran    []string // the schedules run, in order
}

type run struct{ Outcome }

func (r *run) Explored() *Outcome { return &r.Outcome }

// newWorld makes a clean run of the points with these keys, point i
// with the fault crash:x/KEY:i.
func newWorld(keys []uint64, fails func(Schedule) bool) *world {
	w := &world{fails: fails}
	for i, k := range keys {
		w.points = append(w.points, Point{Seq: i + 1, Key: k, What: "write", Atoms: []Atom{{Kind: Crash, N: i + 1, Res: "x/" + string(rune('a'+k))}}})
	}
	return w
}

// run runs s: every fault strikes at its point, and the run makes the
// clean run's points, those after a fault in a world of the faults
// before them.
func (w *world) run(s Schedule) *run {
	w.mu.Lock()
	w.ran = append(w.ran, s.String())
	w.mu.Unlock()
	out := &run{Outcome{Schedule: s, Struck: map[Atom]int{}}}
	for _, p := range w.points {
		for _, a := range s {
			if a.N < p.Seq {
				p.Key = p.Key*31 + uint64(a.N)
			}
		}
		out.Points = append(out.Points, p)
	}
	for _, a := range s {
		out.Struck[a] = a.N
	}
	if w.fails(s) {
		out.Failures = []string{"failed"}
	}
	return out
}

func (w *world) search(depth int) *Search[*run] {
	crashes := func(k Kind) bool { return k == Crash }
	return &Search[*run]{Depth: depth, Parallel: 2, Run: w.run, Injects: crashes, Start: time.Now()}
}

func crash(n int, key uint64) Atom { return Atom{Kind: Crash, N: n, Res: "x/" + string(rune('a'+key))} }

// A bug that two faults together cause is found at depth 2 and not at
// depth 1, by a schedule made of a passing one and a later fault.
func TestTwoFaultsAreFoundAtDepthTwo(t *testing.T) {
	both := func(s Schedule) bool { return slices.Contains(s, crash(1, 0)) && slices.Contains(s, crash(3, 2)) }
	w := newWorld([]uint64{0, 1, 2}, both)
	if failed := w.search(1).From(w.run(nil)); len(failed) != 0 {
		t.Errorf("depth 1 found %d failing runs of a bug that takes two faults", len(failed))
	}
	w = newWorld([]uint64{0, 1, 2}, both)
	s := w.search(2)
	failed := s.From(w.run(nil))
	if len(failed) != 1 || failed[0].Schedule.String() != "crash:x/a:1,crash:x/c:3" {
		var got []string
		for _, r := range failed {
			got = append(got, r.Schedule.String())
		}
		t.Fatalf("depth 2 failed %v, want [crash:x/a:1,crash:x/c:3]", got)
	}
	// Depth 2 extends each passing run with the faults after the last
	// one's point alone: from crash:1, those at 2 and 3; from crash:2,
	// the one at 3; none from crash:3. With the clean run: 1 + 3 + 3.
	if len(w.ran) != 7 {
		t.Errorf("ran %d schedules, want 7: %v", len(w.ran), w.ran)
	}
	for _, r := range w.ran {
		if r == "crash:x/b:2,crash:x/a:1" || r == "crash:x/c:3,crash:x/a:1" {
			t.Errorf("ran %s, a fault before the point where the last one struck", r)
		}
	}
	if !strings.Contains(s.Summary(), "depth 2: 3 schedules generated, 0 deduplicated, 3 run") {
		t.Errorf("the summary does not count depth 2's three schedules:\n%s", s.Summary())
	}
}

// A fault at a point whose key was explored before with that fault is
// not run again: the world there is the same.
func TestAFaultAtAPointOfAKnownWorldIsNotRunAgain(t *testing.T) {
	w := newWorld([]uint64{0, 1, 0}, func(Schedule) bool { return false })
	w.points[2].Atoms = w.points[0].Atoms // the third point is the first's world, with its fault
	s := w.search(1)
	s.From(w.run(nil))
	if len(w.ran) != 3 {
		t.Errorf("ran %v; want the clean run and the faults at points 1 and 2", w.ran)
	}
	if !strings.Contains(s.Summary(), "3 schedules generated, 1 deduplicated, 2 run") {
		t.Errorf("the summary does not count the deduplicated schedule:\n%s", s.Summary())
	}
}

// A failing run shrinks to the smallest part of its faults that still
// fails, and a part that ran before is not run again.
func TestAFailureShrinksToTheFaultsThatCauseIt(t *testing.T) {
	w := newWorld([]uint64{0, 1, 2}, func(s Schedule) bool { return slices.Contains(s, crash(2, 1)) })
	s := w.search(3)
	got := s.Shrink(w.run(Schedule{crash(1, 0), crash(2, 1), crash(3, 2)}))
	if got.Schedule.String() != "crash:x/b:2" {
		t.Errorf("shrunk to %s, want crash:x/b:2", got.Schedule)
	}
	before := len(w.ran)
	if again := s.Shrink(w.run(Schedule{crash(2, 1), crash(3, 2)})); again.Schedule.String() != "crash:x/b:2" || len(w.ran) != before+1 {
		t.Errorf("the second shrink gave %s after %d runs, want crash:x/b:2 after one (the parts ran before)", again.Schedule, len(w.ran)-before)
	}
}

// The budget of runs cuts the schedules beyond it, and with FailFast no
// run starts once one failed; the summary counts what was cut.
func TestTheBudgetAndFailFastCutSchedules(t *testing.T) {
	w := newWorld([]uint64{0, 1, 2, 3}, func(Schedule) bool { return false })
	s := w.search(1)
	s.MaxRuns = 2
	s.From(w.run(nil))
	if len(w.ran) != 3 || !strings.Contains(s.Summary(), "2 run") || !strings.Contains(s.Summary(), "2 cut") { // of four crashes
		t.Errorf("MaxRuns 2 ran %v:\n%s", w.ran, s.Summary())
	}
	w = newWorld([]uint64{0, 1, 2, 3}, func(s Schedule) bool { return len(s) > 0 })
	s = w.search(1)
	s.Parallel, s.FailFast = 1, true
	if failed := s.From(w.run(nil)); len(failed) != 1 || !slices.Equal(w.ran, []string{"", "crash:x/a:1", "crash:x/a:1"}) {
		t.Errorf("FailFast: %d failed after %q, want the first fault, and again alone", len(failed), w.ran)
	}
}

// flaky is a world's fails in which the schedules of loaded fail in
// their first run only, as a failure that needs the timing of the runs
// beside it, and those of fails in every run.
func flaky(w *world, loaded, fails []Atom) func(Schedule) bool {
	return func(s Schedule) bool {
		if slices.ContainsFunc(fails, func(a Atom) bool { return slices.Contains(s, a) }) {
			return true
		}
		if len(s) != 1 || !slices.Contains(loaded, s[0]) {
			return false
		}
		w.mu.Lock() // runs in parallel with other runs' appends
		defer w.mu.Unlock()
		runs := 0
		for _, r := range w.ran {
			if r == s.String() {
				runs++
			}
		}
		return runs == 1 // w.run counts this run before it asks
	}
}

// A failure that passes when its schedule runs again alone, Tries times,
// does not replay: it does not stop a FailFast search, which goes on to
// one that does, and Shrink does not shrink to it.
func TestAFailureThatPassesAloneDoesNotReplay(t *testing.T) {
	w := newWorld([]uint64{0, 1, 2, 3}, nil)
	w.fails = flaky(w, []Atom{crash(2, 1)}, []Atom{crash(3, 2)})
	s := w.search(1)
	s.Parallel, s.FailFast = 1, true
	failed := s.From(w.run(nil))
	want := []string{"", "crash:x/a:1", "crash:x/b:2", "crash:x/b:2", "crash:x/b:2", "crash:x/b:2", "crash:x/c:3", "crash:x/c:3"}
	if !slices.Equal(w.ran, want) {
		t.Errorf("ran %q, want %q: b's failure tried alone %d times, then c's, which replays, stops the search", w.ran, want, Tries)
	}
	if len(failed) != 2 || s.Replays(failed[0]) || !s.Replays(failed[1]) || len(w.ran) != len(want) {
		t.Errorf("Replays of %d failed runs: want b's false and c's true, known without running them again (ran %q)", len(failed), w.ran)
	}

	w = newWorld([]uint64{0, 1, 2, 3}, nil)
	w.fails = flaky(w, []Atom{crash(2, 1)}, []Atom{crash(4, 3)})
	s = w.search(2)
	s.From(w.run(nil)) // b fails among the runs, and d in every run
	got := s.Shrink(w.run(Schedule{crash(2, 1), crash(4, 3)}))
	if got.Schedule.String() != "crash:x/d:4" || !s.Replays(got) {
		t.Errorf("shrunk to %s, want crash:x/d:4: the part that replays, not b's, which fails only among the runs", got.Schedule)
	}
}

// Only the kinds that Injects takes are explored, and a burst only where
// the scenario made a change that one can hide.
func TestInjectsNarrowsTheKinds(t *testing.T) {
	w := newWorld([]uint64{0}, func(Schedule) bool { return false })
	s := w.search(1)
	s.Injects = func(k Kind) bool { return k == Lag || k == Burst }
	clean := w.run(nil)
	s.From(clean)
	if !slices.Equal(w.ran, []string{"", "lag"}) {
		t.Errorf("ran %q, want the clean run and lag: no crash, and no burst without a change to hide", w.ran)
	}
	w.ran = nil
	clean.Burstable = true
	s = w.search(1)
	s.Injects = func(k Kind) bool { return k == Burst }
	s.From(clean)
	if !slices.Equal(w.ran, []string{"burst"}) {
		t.Errorf("ran %q, want burst", w.ran)
	}
}
