package explore

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"
)

// Outcome is what a run of a schedule did, as the search reads it.
type Outcome struct {
	Schedule Schedule
	Failures []string
	Points   []Point      // where a fault could strike
	Struck   map[Atom]int // the seq of the point where each of the schedule's faults struck
	// Burstable: the scenario made a change before its first deletion
	// that the operator can miss, for a burst to strike; read of the
	// clean run.
	Burstable bool
	Took      time.Duration
}

// Failed reports whether the run failed.
func (o *Outcome) Failed() bool { return len(o.Failures) > 0 }

// At describes the point where a struck, or is empty if it never did.
func (o *Outcome) At(a Atom) string {
	seq, ok := o.Struck[a]
	if !ok || seq < 1 || seq > len(o.Points) {
		return ""
	}
	return o.Points[seq-1].What
}

// Run is the record of a run, which holds its Outcome and what else its
// runner keeps of it.
type Run interface{ Explored() *Outcome }

// Search explores the schedules of up to Depth faults made from a clean
// run: a run with k faults is made from one with k-1 that passed, with
// the new fault at a point after the last one struck, and a fault at a
// point whose key was explored before with that fault is not run again.
//
// A failure found among Parallel runs may need the timing of a loaded
// machine, and pass when its schedule runs by itself, as its replay runs
// it. Replays tells the two apart; a FailFast search stops at a failure
// that replays, Shrink shrinks to parts that replay.
type Search[R Run] struct {
	Depth    int
	Budget   time.Duration   // of time since Start; none if zero
	MaxRuns  int             // none if zero
	Parallel int             // runs at a time
	FailFast bool            // no run starts once one failed and replays
	Injects  func(Kind) bool // which kinds are explored; every kind if nil
	Run      func(Schedule) R
	Start    time.Time // when the budget began

	mu      sync.Mutex
	visited map[uint64]bool // the points explored, with the fault
	runs    map[string]R    // by schedule
	replays map[string]bool // by schedule, of the failures tried alone
	stats   []level         // by depth
	// alone is held by each of runAll's runs for reading, and for
	// writing by a run that must have no other in flight.
	alone sync.RWMutex
}

// Tries is how many times Replays runs a failure's schedule alone before
// it says the failure does not replay; a replay command's -test.count
// should be as many.
const Tries = 3

// level counts the schedules of one depth.
type level struct {
	generated, deduplicated, run, cut, failed int
	took                                      []time.Duration // of each run
}

// From explores the schedules made from clean, a depth at a time, and
// returns the runs that failed.
func (s *Search[R]) From(clean R) []R {
	frontier := []R{clean}
	var failed []R
	for depth := 1; depth <= s.Depth && len(frontier) > 0; depth++ {
		s.mu.Lock()
		s.stats = append(s.stats, level{})
		s.mu.Unlock()
		var next []Schedule
		for _, r := range frontier {
			next = append(next, s.extend(r.Explored(), depth)...)
		}
		frontier = frontier[:0]
		for _, r := range s.runAll(next, depth) {
			if r.Explored().Failed() {
				failed = append(failed, r)
			} else {
				frontier = append(frontier, r)
			}
		}
	}
	return failed
}

// extend makes the schedules of depth that add a fault to out's, at a
// point after the last of out's faults struck, leaving out those whose
// point and fault were explored already.
func (s *Search[R]) extend(out *Outcome, depth int) []Schedule {
	after := 0
	for _, a := range out.Schedule {
		seq, ok := out.Struck[a]
		if !ok {
			return nil // a fault that never struck: the run was the clean one
		}
		if a.Kind == Lag || a.Kind == Burst {
			continue
		}
		after = max(after, seq)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.visited == nil {
		s.visited = map[uint64]bool{}
	}
	st := &s.stats[depth-1]
	var next []Schedule
	if len(out.Schedule) == 0 {
		if s.injects(Lag) {
			st.generated++
			next = append(next, Schedule{{Kind: Lag}})
		}
		if s.injects(Burst) && out.Burstable {
			st.generated++
			next = append(next, Schedule{{Kind: Burst}})
		}
	}
	for _, p := range out.Points {
		if p.Seq <= after {
			continue
		}
		for _, a := range p.Atoms {
			if !s.injects(a.Kind) {
				continue
			}
			st.generated++
			h := fnv.New64a()
			fmt.Fprint(h, p.Key, a.Kind, a.Res) // two drifts at one point are two faults
			if s.visited[h.Sum64()] {
				st.deduplicated++
				continue
			}
			s.visited[h.Sum64()] = true
			next = append(next, append(slices.Clone(out.Schedule), a))
		}
	}
	return next
}

func (s *Search[R]) injects(k Kind) bool { return s.Injects == nil || s.Injects(k) }

// runAll runs the schedules, Parallel at a time, until the budget is
// spent.
func (s *Search[R]) runAll(ss []Schedule, depth int) []R {
	outs := make([]R, len(ss))
	ran := make([]bool, len(ss))
	sem := make(chan struct{}, max(1, s.Parallel))
	var wg sync.WaitGroup
	for i, sched := range ss {
		sem <- struct{}{} // a slot first: the runs before may spend the budget or fail meanwhile
		if s.spent() || (s.FailFast && s.anyFailed()) {
			<-sem
			s.mu.Lock()
			s.stats[depth-1].cut += len(ss) - i
			s.mu.Unlock()
			break
		}
		s.mu.Lock()
		s.stats[depth-1].run++
		s.mu.Unlock()
		wg.Go(func() {
			defer func() { <-sem }()
			s.alone.RLock()
			if s.FailFast && s.anyFailed() { // while a failure replayed
				s.alone.RUnlock()
				s.mu.Lock()
				s.stats[depth-1].run--
				s.stats[depth-1].cut++
				s.mu.Unlock()
				return
			}
			r := s.Run(sched)
			s.alone.RUnlock()
			outs[i], ran[i] = r, true
			s.mu.Lock()
			s.remember(sched, r)
			st := &s.stats[depth-1]
			st.took = append(st.took, r.Explored().Took)
			if r.Explored().Failed() {
				st.failed++
			}
			s.mu.Unlock()
			if s.FailFast && r.Explored().Failed() {
				s.Replays(r)
			}
		})
	}
	wg.Wait()
	var out []R
	for i, r := range outs {
		if ran[i] {
			out = append(out, r)
		}
	}
	return out
}

// remember keeps r as the run of sched; the caller holds s.mu.
func (s *Search[R]) remember(sched Schedule, r R) {
	if s.runs == nil {
		s.runs = map[string]R{}
	}
	s.runs[sched.String()] = r
}

// anyFailed reports whether a run failed so far and replays.
func (s *Search[R]) anyFailed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, replays := range s.replays {
		if replays {
			return true
		}
	}
	return false
}

// Replays reports whether a failed run's schedule fails when it runs with
// no other run of the search in flight: in one of Tries runs, which
// wait for the runs in flight to finish and hold back those that would
// start. A failure that passes them all needed the timing of the runs
// beside it, and its replay command would pass. The answer is kept.
func (s *Search[R]) Replays(r R) bool {
	out := r.Explored()
	if !out.Failed() {
		return false
	}
	if replays, known := s.Replayed(out.Schedule); known {
		return replays
	}
	s.alone.Lock()
	defer s.alone.Unlock()
	if replays, known := s.Replayed(out.Schedule); known { // decided while this waited
		return replays
	}
	replays := false
	for try := 0; try < Tries && !replays; try++ {
		replays = s.Run(out.Schedule).Explored().Failed()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decided(out.Schedule, replays)
	return replays
}

// Replayed returns whether sched's failure replays, if Replays found out.
func (s *Search[R]) Replayed(sched Schedule) (replays, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	replays, known = s.replays[sched.String()]
	return replays, known
}

// decided keeps whether sched's failure replays; the caller holds s.mu.
func (s *Search[R]) decided(sched Schedule, replays bool) {
	if s.replays == nil {
		s.replays = map[string]bool{}
	}
	s.replays[sched.String()] = replays
}

// spent reports whether the budget of time or runs is spent.
func (s *Search[R]) spent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := 0
	for _, st := range s.stats {
		runs += st.run
	}
	return (s.Budget > 0 && time.Since(s.Start) > s.Budget) || (s.MaxRuns > 0 && runs >= s.MaxRuns)
}

// Summary says what was explored.
func (s *Search[R]) Summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "explored up to %d fault(s) in %v:", s.Depth, time.Since(s.Start).Round(time.Second))
	for i, st := range s.stats {
		fmt.Fprintf(&b, "\n  depth %d: %d schedules generated, %d deduplicated, %d run (%v each, median), %d cut, %d failed",
			i+1, st.generated, st.deduplicated, st.run, median(st.took).Round(10*time.Millisecond), st.cut, st.failed)
	}
	return b.String()
}

// once runs sched alone, or returns its run if it ran already; a run
// alone that failed replays.
func (s *Search[R]) once(sched Schedule) R {
	s.mu.Lock()
	r, ok := s.runs[sched.String()]
	s.mu.Unlock()
	if ok {
		return r
	}
	s.alone.Lock()
	r = s.Run(sched)
	s.alone.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remember(sched, r)
	if r.Explored().Failed() {
		s.decided(sched, true)
	}
	return r
}

// Shrink returns the run of the smallest part of a failed run's faults
// that still fails and replays, trying the parts from the smallest up:
// delta debugging, which for a handful of faults is every part.
func (s *Search[R]) Shrink(r R) R {
	sched := r.Explored().Schedule
	for size := 1; size < len(sched); size++ {
		for _, part := range Subsets(sched, size) {
			if small := s.once(part); s.Replays(small) {
				return s.Shrink(small)
			}
		}
	}
	return r
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(ds))
	return sorted[len(sorted)/2]
}
