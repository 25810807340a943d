package fsmvet

import (
	"fmt"
	"go/ast"
	"go/types"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/kfsm/kfsm/internal/refusal"
	"github.com/kfsm/kfsm/internal/typo"
)

// Analyzer finds the transitions that kfsm would refuse at run time, and
// the states and exits that no code can reach. See the package doc.
var Analyzer = &analysis.Analyzer{
	Name: "kfsm",
	Doc: `check the transitions of kfsm state machines

For each machine that the package declares with fsm.New, the analyzer reads
the handler of each state and every fsm.Next it can return with constant
states, and reports a Next that kfsm would refuse at run time: to a state
that is not among the state's exits, or that the machine does not declare.
It reports a machine that no longer declares a state of a released version
kept in its lock file (NAME.graph.lock.json beside the package), with no
migration to move the state's objects. It warns about states that nothing
moves to and exits that a handler never takes. A machine that a test file
keeps from an earlier release is checked against its own graph, and a Next of
the current code that it refuses is a warning in the test file. What it
cannot resolve, such as a state computed at run time, it skips.`,
	URL: "https://pkg.go.dev/github.com/kfsm/kfsm/fsmvet",
	Run: run,
}

// warnings says whether the analyzer reports its warnings; the flag
// -kfsm.warnings=false (go vet) or -warnings=false turns them off.
var warnings = true

func init() {
	Analyzer.Flags.BoolVar(&warnings, "warnings", true, "also report states that nothing moves to and exits that a handler never takes")
}

// The categories of the analyzer's diagnostics. IllegalNext,
// UndeclaredState and SharedHandler are errors: kfsm refuses such a
// transition at run time. StrandedState is an error too: an upgrade would
// stop objects. DeadState and UnusedExit are warnings: code that can
// never run, which a dynamic target the analyzer cannot see may still
// explain; UncheckedLock is a warning that a check could not run;
// KeptVersion is a warning about a test's copy of an earlier release.
const (
	// IllegalNext is a Next to a state that is not among the exits of the
	// state whose handler returns it.
	IllegalNext = "illegal-next"
	// UndeclaredState is a Next to a state that the machine does not
	// declare at all.
	UndeclaredState = "undeclared-state"
	// SharedHandler is a Next in a handler that serves several states,
	// legal from some of them and not from another.
	SharedHandler = "shared-handler"
	// DeadState is a declared state that no Next, initial, timeout,
	// retries or deletion edge leads to.
	DeadState = "dead-state"
	// UnusedExit is a declared exit that the state's handler never takes.
	UnusedExit = "unused-exit"
	// StrandedState is a machine that no longer declares a state of a
	// version that its lock file keeps, with no migration to move the
	// state's objects: they would stop, Stalled, when the operator
	// upgrades.
	StrandedState = "stranded-state"
	// UncheckedLock is a machine with a lock file that the analyzer
	// cannot check it against: its states or versions are not all
	// constant, or are declared outside the package.
	UncheckedLock = "unchecked-lock"
	// KeptVersion is a Next of the package's code that a machine kept
	// from an earlier release in a test file refuses: the code speaks the
	// current graph, and the kept machine stops an object that the test
	// moves through the state.
	KeptVersion = "kept-version"
)

// IsWarning reports whether diagnostics of the category are warnings
// rather than errors.
func IsWarning(category string) bool {
	return category == DeadState || category == UnusedExit || category == UncheckedLock || category == KeptVersion
}

const fsmPath = "github.com/kfsm/kfsm/fsm"

func run(pass *analysis.Pass) (any, error) {
	if !usesFSM(pass.Pkg) {
		return nil, nil
	}
	c := newChecker(pass)
	c.index()
	c.declarations()
	c.keptVersions()
	c.check()
	return nil, nil
}

func usesFSM(pkg *types.Package) bool {
	if pkg.Path() == fsmPath {
		return true
	}
	return slices.ContainsFunc(pkg.Imports(), func(p *types.Package) bool { return p.Path() == fsmPath })
}

// check reports, for every state whose handler it can read, the Nexts
// that kfsm would refuse, and then the warnings.
func (c *checker) check() {
	for _, d := range c.states {
		c.checkState(d)
	}
	for _, m := range c.machines {
		c.checkLock(m)
	}
	if !warnings {
		return
	}
	for _, d := range c.states {
		c.unusedExits(d)
	}
	for _, m := range c.machines {
		c.deadStates(m)
	}
}

// checkState reports the Nexts of d's handler that leave d illegally.
func (c *checker) checkState(d *stateDecl) {
	if !d.nameKnown || !d.exitsKnown || !d.handlerKnown {
		return
	}
	for _, ref := range d.funcs {
		s := c.handlerSummary(ref)
		for _, n := range s.nexts {
			if n.dynamic || !n.allowed.allows(d.name) {
				continue
			}
			if _, bad, ok := choose(n.events, d.exits); !ok && !c.allowedElsewhere(d, ref, n) {
				c.illegal(d, ref, s, n, bad)
			}
		}
	}
}

// allowedElsewhere reports whether another declaration of d's state on
// the same machine, one that may run handler ref, may allow n. Only one
// of them is in force at run time, chosen by a flag that the handler may
// test as well. What another machine allows says nothing of d's.
func (c *checker) allowedElsewhere(d *stateDecl, ref *funcRef, n *nextSite) bool {
	for _, o := range c.states {
		if o == d || o.nameKnown && o.name != d.name || o.handlerKnown && !slices.Contains(o.funcs, ref) || !d.mayShareMachine(o) {
			continue
		}
		if !o.exitsKnown {
			return true
		}
		if _, _, ok := choose(n.events, o.exits); ok {
			return true
		}
	}
	return false
}

// illegal reports n, a Next that state d's handler returns and kfsm would
// refuse because of event bad.
func (c *checker) illegal(d *stateDecl, ref *funcRef, s *summary, n *nextSite, bad string) {
	var others []string
	for _, o := range c.sharing[ref.key] {
		if o.name != d.name && o.nameKnown && o.exitsKnown && n.allowed.allows(o.name) && d.mayShareMachine(o) && !slices.Contains(others, o.name) {
			if _, _, ok := choose(n.events, o.exits); ok {
				others = append(others, o.name)
			}
		}
	}
	if len(others) > 0 && s.imprecise {
		// The handler reads r.State in a way the analysis does not
		// follow: it may return this Next only from the others.
		return
	}
	// A machine of a test refuses the package's code: the refusal is the
	// test's, and goes where the test registers the handler.
	var at ast.Node = n.call
	if c.inTest(d.call) && !c.inTest(n.call) {
		if k := d.kept(); k != nil {
			c.keptRefusal(d, k, n, bad)
			return
		}
		at = d.handler
	}
	category := IllegalNext
	undeclared := len(others) == 0 && c.undeclared(d, bad)
	msg := refusal.Why(refusal.Present, d.name, n.events, bad, d.exits, undeclared, typo.Closest(bad, c.declared(d)))
	if at != n.call {
		msg += "; the Next is at " + c.where(n.call)
	}
	switch {
	case len(others) > 0:
		category = SharedHandler
		msg += fmt.Sprintf("; its handler %s also serves state %s, where the move is legal: branch on r.State, or %s",
			handlerName(d), strings.Join(others, " and "), c.fix(d, n, bad))
	case undeclared:
		category = UndeclaredState
	default:
		msg += "; kfsm refuses the transition at run time: " + c.fix(d, n, bad)
	}
	c.report(at, category, msg)
}

// fix says how to make n legal: the fsm.To to declare, or, for a move
// that would start the deletion path, how the path starts.
func (c *checker) fix(d *stateDecl, n *nextSite, bad string) string {
	if bad == defaultEvent {
		if d.toCall != nil {
			return "Default takes the last declared exit, and there is none; declare one with " + types.ExprString(d.toCall) + " at " + c.where(d.toCall)
		}
		return fmt.Sprintf("Default takes the last declared exit, and there is none; add fsm.To to state %s at %s", d.name, c.where(d.at))
	}
	if c.entersDeletion(d, bad) {
		return fmt.Sprintf("to enter the deletion path, delete the object, and kfsm moves it to %s by itself", bad)
	}
	target := n.exprs[slices.Index(n.events, bad)]
	if d.toCall == nil {
		return fmt.Sprintf("to allow it, add fsm.To(%s) to state %s at %s", types.ExprString(target), d.name, c.where(d.at))
	}
	args := make([]string, 0, len(d.toCall.Args)+1)
	for _, a := range d.toCall.Args {
		args = append(args, types.ExprString(a))
	}
	args = append(args, types.ExprString(target))
	return fmt.Sprintf("to allow it, declare %s(%s) at %s", types.ExprString(d.toCall.Fun), strings.Join(args, ", "), c.where(d.toCall))
}

// entersDeletion reports whether a move from d to s would start a
// deletion path from outside it. kfsm starts the path itself once the
// object is deleted; an exit there would run it on an object that is not
// being deleted. From a state on the path, a move back to its start is an
// exit like any other.
func (c *checker) entersDeletion(d *stateDecl, s string) bool {
	for _, m := range d.machines {
		if slices.Contains(m.onDeletes, s) && !m.deletionPath()[d.name] {
			return true
		}
	}
	return false
}

// undeclared reports whether no machine that d may belong to declares
// state s, as far as the analysis can tell: false when it cannot.
func (c *checker) undeclared(d *stateDecl, s string) bool {
	if s == defaultEvent || d.open || len(d.machines) == 0 {
		return false
	}
	for _, m := range d.machines {
		if m.open || !m.namesKnown() || slices.Contains(m.names(), s) {
			return false
		}
	}
	return true
}

// declared lists the states of d's machines, for suggestions.
func (c *checker) declared(d *stateDecl) []string {
	var names []string
	for _, m := range d.machines {
		for _, n := range m.names() {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

// unusedExits warns about the exits of d that its handler never takes,
// when the analysis reads every result the handler can return.
func (c *checker) unusedExits(d *stateDecl) {
	if d.kept() != nil {
		return // a kept release's graph is what it was, whatever the code takes now
	}
	taken, ok := c.taken(d)
	if !ok || len(d.funcs) == 0 {
		return
	}
	handler := handlerName(d)
	for i, exit := range d.exits {
		if !taken[exit] {
			c.report(d.exitExprs[i], UnusedExit,
				fmt.Sprintf("state %s has an exit to %s that its handler %s never takes: no Next it returns leads there", d.name, exit, handler))
		}
	}
}

// taken returns the exits of d that its handler's Nexts take, and false
// when the analysis cannot read them all.
func (c *checker) taken(d *stateDecl) (map[string]bool, bool) {
	if !d.nameKnown || !d.exitsKnown || !d.handlerKnown {
		return nil, false
	}
	taken := map[string]bool{}
	for _, ref := range d.funcs {
		s := c.handlerSummary(ref)
		if s.unknown {
			return nil, false
		}
		for _, n := range s.nexts {
			// Where the guards are not known, every Next may leave d.
			if !s.imprecise && !n.allowed.allows(d.name) {
				continue
			}
			if n.dynamic {
				return nil, false
			}
			if to, _, ok := choose(n.events, d.exits); ok {
				taken[to] = true
			}
		}
	}
	return taken, true
}

// deadStates warns about the states of m that nothing moves to, when the
// analysis sees the whole machine.
func (c *checker) deadStates(m *machine) {
	if m.open || !m.edgesKnown || m.current != nil {
		return
	}
	targeted := map[string]bool{}
	for _, s := range append(slices.Clone(m.initials), m.onDeletes...) {
		targeted[s] = true
	}
	for _, d := range m.states {
		if !d.nameKnown || !d.exitsKnown || !d.targetsKnown {
			return
		}
		for _, t := range d.edgeTargets {
			targeted[t] = true
		}
		taken, ok := c.taken(d)
		if !ok {
			taken = map[string]bool{}
			for _, e := range d.exits {
				taken[e] = true
			}
		}
		for t := range taken {
			targeted[t] = true
		}
	}
	for _, d := range m.states {
		if !targeted[d.name] {
			c.report(d.call.Args[0], DeadState,
				fmt.Sprintf("state %s is declared but nothing moves there: no handler returns a Next to it, and no initial, timeout, retries or deletion edge leads there", d.name))
		}
	}
}

// handlerName is d's handler as the source writes it.
func handlerName(d *stateDecl) string {
	if _, lit := ast.Unparen(d.handler).(*ast.FuncLit); lit {
		return "(a function literal)"
	}
	return types.ExprString(d.handler)
}

// report reports a diagnostic once, whichever way the analysis reached
// it. The message names the places it refers to, so that every driver
// (go vet, golangci-lint) prints one line.
func (c *checker) report(at ast.Node, category, msg string) {
	key := fmt.Sprintf("%d %s", at.Pos(), msg)
	if c.reported[key] {
		return
	}
	c.reported[key] = true
	c.pass.Report(analysis.Diagnostic{Pos: at.Pos(), End: at.End(), Category: category, Message: msg})
}

// where names a place in the source as file:line.
func (c *checker) where(n ast.Node) string {
	p := c.pass.Fset.Position(n.Pos())
	return fmt.Sprintf("%s:%d", filepath.Base(p.Filename), p.Line)
}

// choose picks the exit that a Next with the given events takes, as kfsm
// does at run time: among the events, the exit declared first, Default
// standing for the last exit. It returns the first event that names no
// exit, and false, when the Next is illegal.
func choose(events, exits []string) (to, bad string, ok bool) {
	best := -1
	for _, ev := range events {
		i := slices.Index(exits, ev)
		if ev == defaultEvent {
			i = len(exits) - 1
		}
		if i < 0 {
			return "", ev, false
		}
		if best < 0 || i < best {
			best = i
		}
	}
	return exits[best], "", true
}

// defaultEvent is the value of fsm.Default.
const defaultEvent = "(default)"
