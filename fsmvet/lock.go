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

// versionDecl is one Version call: the version it declares, and its
// migrations.
type versionDecl struct {
	n          int
	migrations []migrationDecl
}

// migrationDecl is one migration: the states whose objects it moves, and
// the state it moves them to, "" when a split's function picks it or
// the analysis cannot read it.
type migrationDecl struct {
	from []string
	to   string
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
			mig, ok := c.migration(arg)
			d.migrations, known = append(d.migrations, mig), known && ok
		}
	}
	for _, m := range set.ms {
		m.versions = append(m.versions, d)
		m.versionsKnown = m.versionsKnown && known
	}
}

// migration reads the migration e, and says whether it knows the states
// whose objects e moves.
func (c *checker) migration(e ast.Expr) (migrationDecl, bool) {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok || len(call.Args) == 0 {
		return migrationDecl{}, false
	}
	var d migrationDecl
	from, to := call.Args[:1], ast.Expr(nil)
	switch fsmFunc(c.callee(call)) {
	case "Rename", "Remove":
		if len(call.Args) > 1 {
			to = call.Args[1]
		}
	case "Split":
	case "Merge":
		if call.Ellipsis.IsValid() {
			return migrationDecl{}, false
		}
		from, to = call.Args[1:], call.Args[0]
	default:
		return migrationDecl{}, false
	}
	if to != nil {
		d.to, _ = c.stateConst(to)
	}
	for _, a := range from {
		s, ok := c.stateConst(a)
		if !ok {
			return migrationDecl{}, false
		}
		d.from = append(d.from, s)
	}
	return d, true
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
	current := m.version()
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

// version is the version of m's graph: the highest that it declares.
func (m *machine) version() int {
	current := 1
	for _, v := range m.versions {
		current = max(current, v.n)
	}
	return current
}

// moves reports whether a migration of a version after from, up to
// current, moves the objects of state.
func (m *machine) moves(from, current int, state string) bool {
	return slices.ContainsFunc(m.versions, func(v versionDecl) bool {
		return v.n > from && v.n <= current && slices.ContainsFunc(v.migrations, func(d migrationDecl) bool {
			return slices.Contains(d.from, state)
		})
	})
}

// migrated returns the state that m's migrations of the versions after
// from move the objects of state to, version by version: state itself
// when none moves them, "" when the analysis cannot tell.
func (m *machine) migrated(state string, from int) string {
	for n := from + 1; n <= m.version(); n++ {
		for _, v := range m.versions {
			if v.n != n {
				continue
			}
			// Each migration of a version moves the objects it finds at
			// the version before: one of them at most moves state's.
			i := slices.IndexFunc(v.migrations, func(d migrationDecl) bool { return slices.Contains(d.from, state) })
			if i < 0 {
				continue
			}
			if state = v.migrations[i].to; state == "" {
				return ""
			}
			break
		}
	}
	return state
}
