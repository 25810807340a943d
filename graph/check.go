package graph

import (
	"fmt"
	"slices"
	"strings"
)

// The problems Check reports.
const (
	// Trap is a closed set of states that an object can reach from the
	// initial state and then never leave for a place to rest.
	Trap ProblemCode = "Trap"
	// DeletionTrap is a closed set of states on the deletion path from
	// which no final state can be reached: the finalizer stays.
	DeletionTrap ProblemCode = "DeletionTrap"
	// UnboundedCycle is a cycle that kfsm can go round for ever by itself.
	UnboundedCycle ProblemCode = "UnboundedCycle"
	// GoalUnreachable is a goal that some state cannot reach.
	GoalUnreachable ProblemCode = "GoalUnreachable"
)

// Finding is a problem that Check proves, with its counterexample: a walk
// that an object can take to the problem and, where the problem repeats,
// the loop it then goes round.
type Finding struct {
	// Problem says what is wrong. Its States are the closed set of a
	// trap, the states of a cycle along it (from where the walk enters
	// it), or the states from which a goal cannot be reached.
	Problem
	// Deleting tells that the walk starts at the OnDelete state, where
	// deletion takes an object from whatever state it was in; otherwise
	// it starts at the initial state.
	Deleting bool
	// Path is the walk from where it starts to where the problem begins,
	// both included.
	Path []State
	// Loop, when the problem repeats, goes round from the last state of
	// Path back to it: Loop[0] is that state, and the step after the
	// last of Loop leads to Loop[0] again.
	Loop []State
	// Steps are the edges that Path and then Loop take, in order: the
	// timeout or retries edge where kfsm takes one, the exit where a
	// handler does.
	Steps []Edge
	// Goal is the goal that cannot be reached, for GoalUnreachable.
	Goal State
}

// Walk is the counterexample in words: "Start -> Updating -> Failed",
// then ", then for ever: Failed -> Retrying -> Failed" when it loops; a
// walk on the deletion path starts with "on delete".
func (f Finding) Walk() string {
	var b strings.Builder
	if f.Deleting {
		b.WriteString("on delete -> ")
	}
	b.WriteString(join(f.Path, " -> "))
	if len(f.Loop) > 0 {
		b.WriteString(", then for ever: ")
		b.WriteString(join(append(slices.Clone(f.Loop), f.Loop[0]), " -> "))
	}
	return b.String()
}

// maxCycles bounds the elementary cycles that Check examines for each
// kind of unbounded cycle; a graph can have exponentially many.
const maxCycles = 1000

// Check proves or refutes, on the graph alone, that no object can get
// stuck in ways that kfsm's rules allow. It treats each handler as a
// choice, made anew on every run, among the state's declared exits
// (Next), Wait and Done (stay), Fail (retried, then the retries edge or
// Stalled) and Stop (Stalled), and adds the moves that kfsm makes by
// itself: the timeout edge, taken whatever the handler says, and the
// deletion entry into the OnDelete state. Goals are states that a
// machine's Goal may ask for. Check returns its findings, each with a
// counterexample, in the order below; nil means that the graph has none.
//
//   - Trap: a closed set of states, reachable from the initial state
//     without deletion, from which an object can never rest: no final
//     state and no resting state (one that is not final and has no
//     timeout, where Done holds an object) can be reached. When final
//     states can be reached from the initial state, a job that ends, a
//     closed set from which none can be is a Trap too: its objects never
//     finish. Each trap is reported once, as the smallest closed set that
//     a walk falls into.
//   - DeletionTrap: a closed set of states reachable from the OnDelete
//     state from which no final state can be reached, so that the
//     finalizer of an object deleted there is never removed. Validate
//     only asks that a final state be reachable from the OnDelete state;
//     Check asks it of every state that the deletion path can reach.
//   - UnboundedCycle: an elementary cycle that kfsm can go round for ever
//     by itself: every edge on it is a timeout or retries edge, which
//     kfsm takes without a handler's Next or a change of the object; or
//     it lies on the deletion path, where no change of the object comes
//     to end it, and no state on it has a timeout or retries edge that
//     leaves it. Each cycle is reported once, in declaration order; one
//     within a trap already reported is left out, for the trap's own
//     walk goes round it.
//   - GoalUnreachable: a goal that some state cannot reach through the
//     declared exits, as kfsm walks to goals ([Graph.Path]), though an
//     object can be there: a state reachable from the initial state
//     without deletion, other than a final one. One finding per goal
//     lists every such state; its walk leads to the nearest.
//
// # Assumptions
//
//   - Outside changes (a new spec, a changed child, a retry asked for)
//     drive the live side: a cycle of exits there, such as Roaming ->
//     Eating -> Sleeping -> Roaming, is the machine doing its work, and
//     is not reported.
//   - Handlers may return anything the graph allows: Check knows nothing
//     of their code, so it proves what the graph makes possible, not
//     what the handlers do.
//   - The graph is sound: Check presumes that Validate accepts it. On an
//     invalid graph, it reasons about the declared states only, and its
//     findings may be incomplete.
//
// # Caveats
//
//   - A timeout starts again each time its state is entered, so a cycle
//     that comes round sooner than a timeout on it never sees it fire;
//     Check counts the timeout edge as a way out all the same.
//   - Check examines at most 1,000 elementary cycles of each kind, in
//     declaration order; a graph with more (a deletion path whose states
//     all lead to each other) gets the findings among those.
//   - What a handler does outside the graph (a child it applies, a
//     service it calls) is not modelled, nor how long timeouts and
//     backoffs are: only where each leads.
func (g *Graph) Check(goals ...State) []Finding {
	c := newChecker(g)
	c.traps()
	c.deletionTraps()
	c.unboundedCycles()
	c.goals(goals)
	return c.findings
}

// checker holds what the analyses share: the declared states in order
// and the edges between them.
type checker struct {
	g                 *Graph
	order             []State
	spec              map[State]StateSpec
	out               map[State][]Edge
	initial, onDelete State
	findings          []Finding
}

func newChecker(g *Graph) *checker {
	c := &checker{g: g, spec: map[State]StateSpec{}, out: map[State][]Edge{}, initial: g.Initial(), onDelete: g.OnDelete()}
	for _, s := range g.States {
		if _, dup := c.spec[s.Name]; !dup {
			c.spec[s.Name] = s
			c.order = append(c.order, s.Name)
		}
	}
	for _, e := range g.Edges() {
		if _, ok := c.spec[e.To]; ok {
			c.out[e.From] = append(c.out[e.From], e)
		}
	}
	return c
}

// next returns the distinct targets of s's edges, in edge order.
func (c *checker) next(s State) []State {
	var next []State
	for _, e := range c.out[s] {
		if !slices.Contains(next, e.To) {
			next = append(next, e.To)
		}
	}
	return next
}

// reach returns the declared states reachable from start, start included.
func (c *checker) reach(start State) map[State]bool {
	if _, ok := c.spec[start]; !ok || start == "" {
		return map[State]bool{}
	}
	return search([]State{start}, c.next)
}

// coreach returns the states from which a state where goal is true can
// be reached, those states included.
func (c *checker) coreach(goal func(State) bool) map[State]bool {
	into := map[State][]State{}
	var goals []State
	for _, s := range c.order {
		for _, to := range c.next(s) {
			into[to] = append(into[to], s)
		}
		if goal(s) {
			goals = append(goals, s)
		}
	}
	return search(goals, func(s State) []State { return into[s] })
}

// shortest returns the edges of a shortest walk from `from` to a state
// where done is true, through the edges that follow allows: breadth
// first and in edge order, so that of two walks as short the one whose
// first different step was declared first wins. With move, the walk
// takes at least one step, so that it can come back to where it began.
func (c *checker) shortest(from State, done func(State) bool, follow func(Edge) bool, move bool) ([]Edge, bool) {
	if !move && done(from) {
		return nil, true
	}
	parent := map[State]Edge{}
	seen := map[State]bool{from: true}
	queue := []State{from}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, e := range c.out[u] {
			if !follow(e) {
				continue
			}
			if done(e.To) {
				steps := []Edge{e}
				for s := u; s != from; s = parent[s].From {
					steps = append(steps, parent[s])
				}
				slices.Reverse(steps)
				return steps, true
			}
			if !seen[e.To] {
				seen[e.To] = true
				parent[e.To] = e
				queue = append(queue, e.To)
			}
		}
	}
	return nil, false
}

func anyEdge(Edge) bool { return true }

// states returns the walk that steps take from start: start, then where
// each step leads.
func states(start State, steps []Edge) []State {
	walk := []State{start}
	for _, e := range steps {
		walk = append(walk, e.To)
	}
	return walk
}

// add records a finding about the states in set, which a walk from start
// enters and, where it can, goes round.
func (c *checker) add(p Problem, deleting bool, start State, set map[State]bool) {
	in := func(s State) bool { return set[s] }
	path, ok := c.shortest(start, in, anyEdge, false)
	if !ok {
		return
	}
	entry := states(start, path)[len(path)]
	loop, _ := c.shortest(entry, func(s State) bool { return s == entry }, func(e Edge) bool { return set[e.To] }, true)
	f := Finding{Problem: p, Deleting: deleting, Path: states(start, path), Steps: append(path, loop...)}
	if len(loop) > 0 {
		f.Loop = states(entry, loop)[:len(loop)]
	}
	c.findings = append(c.findings, f)
}

// traps reports the closed sets of the live side from which an object
// can never rest, or never finish where finishing is possible.
func (c *checker) traps() {
	live := c.reach(c.initial)
	var finals []State
	for _, s := range c.order {
		if live[s] && c.spec[s].Final {
			finals = append(finals, s)
		}
	}
	rests := c.coreach(func(s State) bool {
		spec := c.spec[s]
		return spec.Final || (len(finals) == 0 && spec.Timeout == nil)
	})
	for _, set := range c.closedSets(func(s State) bool { return live[s] && !rests[s] }) {
		detail := fmt.Sprintf("%s a trap: an object that reaches %s never rests, for %s a timeout that moves it on, "+
			"and no walk from there leads to a final state or to a state without a timeout, where Done would hold it",
			statesAre(set), them(set), eachHas(set))
		if len(finals) > 0 {
			detail = fmt.Sprintf("%s a trap: objects can finish, in %s, but an object that reaches %s never does: no walk from there leads to a final state",
				statesAre(set), orList(finals), them(set))
		}
		c.add(Problem{Code: Trap, States: set, Detail: detail}, false, c.initial, setOf(set))
	}
}

// deletionTraps reports the closed sets of the deletion path from which
// no final state can be reached.
func (c *checker) deletionTraps() {
	if c.onDelete == "" {
		return
	}
	deletion := c.reach(c.onDelete)
	ends := c.coreach(func(s State) bool { return c.spec[s].Final })
	for _, set := range c.closedSets(func(s State) bool { return deletion[s] && !ends[s] }) {
		detail := fmt.Sprintf("the deletion path can reach %s and never leave %s for a final state: the finalizer of an object deleted there would never be removed",
			join(set, ", "), them(set))
		c.add(Problem{Code: DeletionTrap, States: set, Detail: detail}, true, c.onDelete, setOf(set))
	}
}

// closedSets returns the strongly connected components of the states
// where bad is true that no edge leaves: the smallest closed sets that
// walks among those states end in. bad must be closed itself: every
// state that a bad state leads to is bad.
func (c *checker) closedSets(bad func(State) bool) [][]State {
	var nodes []State
	for _, s := range c.order {
		if bad(s) {
			nodes = append(nodes, s)
		}
	}
	var sets [][]State
	for _, comp := range components(nodes, c.next) {
		in := setOf(comp)
		closed := true
		for _, s := range comp {
			for _, to := range c.next(s) {
				closed = closed && in[to]
			}
		}
		if closed {
			sets = append(sets, comp)
		}
	}
	return sets
}

// goals reports, for each goal, the live states that cannot reach it.
func (c *checker) goals(goals []State) {
	live := c.reach(c.initial)
	var done []State
	for _, goal := range goals {
		if slices.Contains(done, goal) {
			continue
		}
		done = append(done, goal)
		if _, ok := c.spec[goal]; !ok {
			c.findings = append(c.findings, Finding{Goal: goal, Problem: Problem{Code: GoalUnreachable, States: []State{goal},
				Detail: fmt.Sprintf("goal %s is not a state of the graph", goal)}})
			continue
		}
		var from []State
		for _, s := range c.order {
			if live[s] && !c.spec[s].Final && !c.g.Reachable(s, goal) {
				from = append(from, s)
			}
		}
		if len(from) == 0 {
			continue
		}
		detail := fmt.Sprintf("goal %s cannot be reached through the declared exits from %s: an object there that is given it stalls with reason GoalUnreachable",
			goal, join(from, ", "))
		path, _ := c.shortest(c.initial, func(s State) bool { return slices.Contains(from, s) }, anyEdge, false)
		c.findings = append(c.findings, Finding{Goal: goal, Problem: Problem{Code: GoalUnreachable, States: from, Detail: detail},
			Path: states(c.initial, path), Steps: path})
	}
}

func setOf(states []State) map[State]bool {
	set := make(map[State]bool, len(states))
	for _, s := range states {
		set[s] = true
	}
	return set
}

// orList names states as "A, B or C".
func orList(states []State) string {
	if len(states) < 2 {
		return join(states, "")
	}
	return join(states[:len(states)-1], ", ") + " or " + string(states[len(states)-1])
}

// statesAre, them and eachHas agree in number with the states they name.
func statesAre(set []State) string {
	if len(set) == 1 {
		return "state " + string(set[0]) + " is"
	}
	return "states " + join(set, ", ") + " are"
}

func them(set []State) string {
	if len(set) == 1 {
		return "it"
	}
	return "them"
}

func eachHas(set []State) string {
	if len(set) == 1 {
		return "it has"
	}
	return "each has"
}
