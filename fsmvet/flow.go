package fsmvet

import (
	"go/ast"
	"go/token"
	"go/types"
)

// flow is what one function body does with its results: what it
// returns, what it assigns to its variables, and under which tests of the
// request's State.
type flow struct {
	body      *ast.BlockStmt
	returns   []returned
	assigns   map[*types.Var][]assigned
	addr      map[*types.Var]bool
	reads     map[*ast.SelectorExpr]bool // reads of r.State: true once a guard understood it
	named     []*types.Var
	nresults  int
	jumps     bool // a goto or a labelled branch, which the walk does not follow
	imprecise bool
}

type returned struct {
	ret *ast.ReturnStmt
	g   guard
}

type assigned struct {
	value
	g guard
}

// local reports whether v is declared in the function: a variable of its
// body or a named result.
func (f *flow) local(v *types.Var) bool {
	if v.Pos() >= f.body.Pos() && v.Pos() < f.body.End() {
		return true
	}
	for _, n := range f.named {
		if n == v {
			return true
		}
	}
	return false
}

func (c *checker) flowOf(body *ast.BlockStmt, typ *ast.FuncType) *flow {
	if f, ok := c.flows[body]; ok {
		return f
	}
	f := &flow{body: body, assigns: map[*types.Var][]assigned{}, addr: map[*types.Var]bool{}, reads: map[*ast.SelectorExpr]bool{}}
	if typ.Results != nil {
		for _, field := range typ.Results.List {
			if len(field.Names) == 0 {
				f.nresults++
			}
			for _, n := range field.Names {
				f.nresults++
				if v, ok := c.info.Defs[n].(*types.Var); ok {
					f.named = append(f.named, v)
				}
			}
		}
	}
	w := &walker{c: c, f: f}
	w.stmts(body.List, guard{})
	for _, understood := range f.reads {
		if !understood || f.jumps {
			f.imprecise = true
		}
	}
	c.flows[body] = f
	return f
}

// walker walks a function body, following the tests of r.State.
type walker struct {
	c      *checker
	f      *flow
	nested int     // inside a function literal: its returns are its own
	breaks []guard // the guards at the breaks of the enclosing statements
	fall   *guard  // the guard at a fallthrough
}

// stmts walks a list of statements under guard g and returns the guard
// after it.
func (w *walker) stmts(list []ast.Stmt, g guard) guard {
	for _, s := range list {
		g = w.stmt(s, g)
	}
	return g
}

// stmt walks s under guard g and returns the guard of the statements
// after it: after an if that returns when r.State is X, r.State is not X.
func (w *walker) stmt(s ast.Stmt, g guard) guard {
	switch s := s.(type) {
	case *ast.BlockStmt:
		return w.stmts(s.List, g)
	case *ast.LabeledStmt:
		return w.stmt(s.Stmt, g)
	case *ast.IfStmt:
		if s.Init != nil {
			g = w.stmt(s.Init, g)
		}
		w.expr(s.Cond)
		then, els := w.guard(s.Cond)
		out := w.stmts(s.Body.List, g.and(then))
		if s.Else != nil {
			return out.or(w.stmt(s.Else, g.and(els)))
		}
		return out.or(g.and(els))
	case *ast.SwitchStmt:
		if s.Init != nil {
			g = w.stmt(s.Init, g)
		}
		return w.switchStmt(s, g)
	case *ast.TypeSwitchStmt:
		if s.Init != nil {
			g = w.stmt(s.Init, g)
		}
		w.stmt(s.Assign, g)
		return w.clauses(s.Body.List, g, true)
	case *ast.SelectStmt:
		return w.clauses(s.Body.List, g, false)
	case *ast.ForStmt:
		if s.Init != nil {
			g = w.stmt(s.Init, g)
		}
		if s.Cond != nil {
			w.expr(s.Cond)
		}
		w.breaks = append(w.breaks, none())
		w.stmt(s.Post, w.stmts(s.Body.List, g))
		broken := w.breaks[len(w.breaks)-1]
		w.breaks = w.breaks[:len(w.breaks)-1]
		if s.Cond == nil {
			return broken // only a break leaves a loop without a condition
		}
		return g
	case *ast.RangeStmt:
		w.expr(s.X)
		for _, e := range []ast.Expr{s.Key, s.Value} {
			if v := w.c.varOf(e); v != nil {
				w.f.assigns[v] = append(w.f.assigns[v], assigned{value{index: -1}, g})
			}
		}
		w.breaks = append(w.breaks, none())
		w.stmts(s.Body.List, g)
		w.breaks = w.breaks[:len(w.breaks)-1]
		return g
	case *ast.ReturnStmt:
		for _, e := range s.Results {
			w.expr(e)
		}
		if w.nested == 0 {
			w.f.returns = append(w.f.returns, returned{s, g})
		}
		return none()
	case *ast.BranchStmt:
		switch {
		case s.Label != nil || s.Tok == token.GOTO:
			w.f.jumps = true
		case s.Tok == token.BREAK && len(w.breaks) > 0:
			w.breaks[len(w.breaks)-1] = w.breaks[len(w.breaks)-1].or(g)
		case s.Tok == token.FALLTHROUGH:
			w.fall = &g
		}
		return none()
	case *ast.AssignStmt:
		for _, e := range s.Rhs {
			w.expr(e)
		}
		w.assign(s.Lhs, s.Rhs, g)
	case *ast.DeclStmt:
		if gd, ok := s.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for _, e := range vs.Values {
					w.expr(e)
				}
				lhs := make([]ast.Expr, len(vs.Names))
				for i, n := range vs.Names {
					lhs[i] = n
				}
				w.assign(lhs, vs.Values, g)
			}
		}
	case *ast.ExprStmt:
		w.expr(s.X)
		if call, ok := ast.Unparen(s.X).(*ast.CallExpr); ok {
			if id, ok := ast.Unparen(call.Fun).(*ast.Ident); ok && id.Name == "panic" {
				if _, builtin := w.c.info.Uses[id].(*types.Builtin); builtin {
					return none()
				}
			}
		}
	case nil:
	default: // go, defer, send, inc/dec
		w.expr(s)
	}
	return g
}

func (w *walker) assign(lhs, rhs []ast.Expr, g guard) {
	for i, l := range lhs {
		v := w.c.varOf(l)
		if v == nil {
			continue
		}
		switch {
		case len(rhs) == 0:
		case len(lhs) == len(rhs):
			w.f.assigns[v] = append(w.f.assigns[v], assigned{value{rhs[i], -1}, g})
		case len(rhs) == 1:
			w.f.assigns[v] = append(w.f.assigns[v], assigned{value{rhs[0], i}, g})
		}
	}
}

// switchStmt walks a switch, whose cases may test r.State, and returns
// the guard after it.
func (w *walker) switchStmt(s *ast.SwitchStmt, g guard) guard {
	if s.Tag != nil {
		w.expr(s.Tag)
	}
	read := w.stateRead(s.Tag)
	// Each clause's guard; rest is the guard of no case matching.
	guards := make([]guard, len(s.Body.List))
	rest := g
	deflt := -1
	for i, cc := range s.Body.List {
		cc := cc.(*ast.CaseClause)
		if cc.List == nil {
			deflt = i
			continue
		}
		cg := none()
		for _, e := range cc.List {
			w.expr(e)
			then, els := guard{}, guard{}
			switch {
			case read != nil:
				if st, ok := w.c.stateConst(e); ok {
					then, els = only(st), except(st)
				} else {
					read = nil // a case the analysis cannot read: the reads stay not understood
				}
			case s.Tag == nil:
				then, els = w.guard(e)
			}
			cg = cg.or(rest.and(then))
			rest = rest.and(els)
		}
		guards[i] = cg
	}
	if read != nil {
		w.f.reads[read] = true
	}
	out := none()
	if deflt >= 0 {
		guards[deflt] = rest
	} else {
		out = rest
	}
	w.breaks = append(w.breaks, none())
	var fell *guard
	for i, cc := range s.Body.List {
		cg := guards[i]
		if fell != nil {
			cg = cg.or(*fell)
		}
		w.fall = nil
		out = out.or(w.stmts(cc.(*ast.CaseClause).Body, cg))
		fell = w.fall
	}
	out = out.or(w.breaks[len(w.breaks)-1])
	w.breaks = w.breaks[:len(w.breaks)-1]
	return out
}

// clauses walks the clauses of a type switch or a select, which say
// nothing of r.State, and returns the guard after them.
func (w *walker) clauses(list []ast.Stmt, g guard, typeSwitch bool) guard {
	out := none()
	deflt := false
	w.breaks = append(w.breaks, none())
	for _, c := range list {
		switch c := c.(type) {
		case *ast.CaseClause:
			deflt = deflt || c.List == nil
			out = out.or(w.stmts(c.Body, g))
		case *ast.CommClause:
			deflt = deflt || c.Comm == nil
			if c.Comm != nil {
				w.stmt(c.Comm, g)
			}
			out = out.or(w.stmts(c.Body, g))
		}
	}
	if typeSwitch && !deflt {
		out = out.or(g)
	}
	out = out.or(w.breaks[len(w.breaks)-1])
	w.breaks = w.breaks[:len(w.breaks)-1]
	return out
}

// expr notes what an expression does that matters: it takes a
// variable's address, reads r.State, or holds a function literal, whose
// assignments to the function's variables count.
func (w *walker) expr(n ast.Node) {
	if n == nil {
		return
	}
	ast.Inspect(n, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			w.nested++
			w.stmts(n.Body.List, guard{})
			w.nested--
			return false
		case *ast.UnaryExpr:
			if n.Op == token.AND {
				if v := w.c.varOf(n.X); v != nil {
					w.f.addr[v] = true
				}
			}
		case *ast.SelectorExpr:
			if w.isStateField(n) {
				if _, ok := w.f.reads[n]; !ok {
					w.f.reads[n] = false
				}
			}
		}
		return true
	})
}

// guard returns what cond, when true and when false, tells about r.State.
func (w *walker) guard(cond ast.Expr) (then, els guard) {
	switch e := ast.Unparen(cond).(type) {
	case *ast.UnaryExpr:
		if e.Op == token.NOT {
			t, f := w.guard(e.X)
			return f, t
		}
	case *ast.BinaryExpr:
		switch e.Op {
		case token.LAND:
			t1, f1 := w.guard(e.X)
			t2, f2 := w.guard(e.Y)
			return t1.and(t2), f1.or(t1.and(f2))
		case token.LOR:
			t1, f1 := w.guard(e.X)
			t2, f2 := w.guard(e.Y)
			return t1.or(f1.and(t2)), f1.and(f2)
		case token.EQL, token.NEQ:
			read, other := w.stateRead(e.X), e.Y
			if read == nil {
				read, other = w.stateRead(e.Y), e.X
			}
			if read == nil {
				break
			}
			st, ok := w.c.stateConst(other)
			if !ok {
				break
			}
			w.f.reads[read] = true
			if e.Op == token.EQL {
				return only(st), except(st)
			}
			return except(st), only(st)
		}
	}
	return guard{}, guard{}
}

// stateRead returns e when it reads the State field of an fsm.Request.
func (w *walker) stateRead(e ast.Expr) *ast.SelectorExpr {
	sel, ok := ast.Unparen(e).(*ast.SelectorExpr)
	if !ok || !w.isStateField(sel) {
		return nil
	}
	return sel
}

func (w *walker) isStateField(sel *ast.SelectorExpr) bool {
	s, ok := w.c.info.Selections[sel]
	return ok && s.Kind() == types.FieldVal && s.Obj().Name() == "State" && isFSMType(s.Recv(), "Request")
}

// guard is what the tests around a statement say of r.State: it is one
// of only, when only is not nil, and otherwise none of except. The zero
// guard allows every state; none allows none (code after a return).
type guard struct {
	only, except map[string]bool
}

func none() guard { return guard{only: map[string]bool{}} }

func only(states ...string) guard {
	g := none()
	for _, s := range states {
		g.only[s] = true
	}
	return g
}

func except(states ...string) guard {
	g := guard{except: map[string]bool{}}
	for _, s := range states {
		g.except[s] = true
	}
	return g
}

func (g guard) allows(state string) bool {
	if g.only != nil {
		return g.only[state]
	}
	return !g.except[state]
}

// and allows the states that both guards allow.
func (g guard) and(h guard) guard {
	switch {
	case g.only != nil && h.only != nil:
		return only(keep(g.only, func(s string) bool { return h.only[s] })...)
	case g.only != nil:
		return only(keep(g.only, func(s string) bool { return !h.except[s] })...)
	case h.only != nil:
		return only(keep(h.only, func(s string) bool { return !g.except[s] })...)
	}
	return except(append(keep(g.except, nil), keep(h.except, nil)...)...)
}

// or allows the states that either guard allows.
func (g guard) or(h guard) guard {
	switch {
	case g.only != nil && h.only != nil:
		return only(append(keep(g.only, nil), keep(h.only, nil)...)...)
	case g.only != nil:
		return except(keep(h.except, func(s string) bool { return !g.only[s] })...)
	case h.only != nil:
		return except(keep(g.except, func(s string) bool { return !h.only[s] })...)
	}
	return except(keep(g.except, func(s string) bool { return h.except[s] })...)
}

// keep lists the states of set that pass, or all of them when pass is nil.
func keep(set map[string]bool, pass func(string) bool) []string {
	var out []string
	for s := range set {
		if pass == nil || pass(s) {
			out = append(out, s)
		}
	}
	return out
}
