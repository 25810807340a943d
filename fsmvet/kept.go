package fsmvet

import (
	"fmt"
	"go/ast"
	"go/types"
	"strings"

	"github.com/kfsm/kfsm/internal/refusal"
)

// keptVersions links each machine declared in a test file to the machine
// of the package's code that it is an earlier version of: one of the same
// name at a later version. A project keeps its last release's machine so,
// to test the migration from it (see docs/upgrades.md).
func (c *checker) keptVersions() {
	for _, m := range c.machines {
		if m.name == "" || !m.versionsKnown || !c.inTest(m.call) {
			continue
		}
		for _, p := range c.machines {
			if p.name == m.name && p.versionsKnown && !c.inTest(p.call) && p.version() > m.version() {
				m.current = p
			}
		}
	}
}

// kept returns the machine that d is declared on when it is an earlier
// version kept in a test file, and nil otherwise.
func (d *stateDecl) kept() *machine {
	if d.open || len(d.machines) == 0 {
		return nil
	}
	for _, m := range d.machines {
		if m.current == nil {
			return nil
		}
	}
	return d.machines[0]
}

// inTest reports whether n is in a test file.
func (c *checker) inTest(n ast.Node) bool {
	return strings.HasSuffix(c.pass.Fset.Position(n.Pos()).Filename, "_test.go")
}

// keptRefusal warns, at state d of machine k, an earlier version kept in
// a test file, that k refuses n, a Next that the package's code returns.
// The code speaks the current version's graph and is checked against the
// current machine: the refusal is the test's, and it matters only if the
// test moves an object through d. Where the current version's migrations
// make the target out of one of d's exits, the warning names the exit, for
// a handler of the test's to return, as the kept release's did.
func (c *checker) keptRefusal(d *stateDecl, k *machine, n *nextSite, bad string) {
	if !warnings {
		return
	}
	cur := k.current
	why := refusal.Why(refusal.Present, d.name, n.events, bad, d.exits, c.undeclared(d, bad), "")
	msg := fmt.Sprintf("machine %s as kept at version %d refuses a Next of version %d's code at %s: %s",
		k.name, k.version(), cur.version(), c.where(n.call), why)
	for i, exit := range d.exits {
		if cur.migrated(exit, k.version()) == bad {
			c.report(d.handler, KeptVersion, msg+fmt.Sprintf("; version %d moves the objects of %s to %s: a handler of the test's that returns Next(%s) takes that exit, as version %d's did",
				cur.version(), exit, bad, types.ExprString(d.exitExprs[i]), k.version()))
			return
		}
	}
	c.report(d.handler, KeptVersion, msg+fmt.Sprintf("; a handler of the test's that returns one of its exits moves objects on from there, as version %d's did", k.version()))
}
