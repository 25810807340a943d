package fsmvet

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kfsm/kfsm/graph"
)

// versionDecl is one Version call: the version it declares, and the
// states whose objects its migrations move.
type versionDecl struct {
	n     int
	moved []string
}

// version records a Version call on the machines of set.
func (c *checker) version(call *ast.CallExpr, set machineSet) {
	known := len(call.Args) > 0 && !call.Ellipsis.IsValid()
	var d versionDecl
	if known {
		tv := c.info.Types[call.Args[0]]
		n, exact := int64(0), false
		if tv.Value != nil && tv.Value.Kind() == constant.Int {
			n, exact = constant.Int64Val(tv.Value)
		}
		d.n, known = int(n), exact
		for _, arg := range call.Args[1:] {
			moved, ok := c.migrationFrom(arg)
			d.moved, known = append(d.moved, moved...), known && ok
		}
	}
	for _, m := range set.ms {
		m.versions = append(m.versions, d)
		m.versionsKnown = m.versionsKnown && known
	}
}

// migrationFrom returns the states whose objects the migration e moves.
func (c *checker) migrationFrom(e ast.Expr) ([]string, bool) {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok || len(call.Args) == 0 {
		return nil, false
	}
	from := call.Args[:1]
	switch fsmFunc(c.callee(call)) {
	case "Rename", "Remove", "Split":
	case "Merge":
		if call.Ellipsis.IsValid() {
			return nil, false
		}
		from = call.Args[1:]
	default:
		return nil, false
	}
	var states []string
	for _, a := range from {
		s, ok := c.stateConst(a)
		if !ok {
			return nil, false
		}
		states = append(states, s)
	}
	return states, true
}

// checkLock reports a machine that would strand the objects of a state of
// a released version that its lock file keeps: a state the machine no
// longer declares, with no migration to move its objects. A machine
// declared in a test file is not checked: a test may keep an earlier
// release's machine, to run the migration from it.
func (c *checker) checkLock(m *machine) {
	at := c.pass.Fset.Position(m.call.Pos()).Filename
	if m.name == "" || strings.HasSuffix(at, "_test.go") {
		return
	}
	file := filepath.Join(filepath.Dir(at), graph.LockFile(m.name))
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err == nil {
		var l *graph.Lock
		if l, err = graph.ParseLock(data); err == nil {
			err = c.strands(m, l)
		}
	}
	switch {
	case errors.Is(err, errUnread):
		if warnings {
			c.report(m.call, UncheckedLock, fmt.Sprintf("machine %s is not checked against %s: %v", m.name, filepath.Base(file), err))
		}
	case err != nil:
		c.report(m.call, StrandedState, fmt.Sprintf("%v (the graphs released are in %s)", err, filepath.Base(file)))
	}
}

var errUnread = errors.New("its states or versions are not all constant, or are declared outside the package")

// strands checks m against the lock l as make generate does, with the
// states and migrations that the code declares.
func (c *checker) strands(m *machine, l *graph.Lock) error {
	if m.open || !m.namesKnown() || !m.versionsKnown {
		return errUnread
	}
	current := 1
	for _, v := range m.versions {
		current = max(current, v.n)
	}
	names := m.names()
	stranded := func(earlier *graph.Graph) []graph.State {
		var out []graph.State
		for _, s := range earlier.States {
			if !slices.Contains(names, string(s.Name)) && !m.moves(max(earlier.Version, 1), current, string(s.Name)) {
				out = append(out, s.Name)
			}
		}
		return out
	}
	return l.Update(&graph.Graph{Name: m.name, Version: current}, stranded)
}

// moves reports whether a migration of a version after from, up to
// current, moves the objects of state.
func (m *machine) moves(from, current int, state string) bool {
	return slices.ContainsFunc(m.versions, func(v versionDecl) bool {
		return v.n > from && v.n <= current && slices.Contains(v.moved, state)
	})
}
