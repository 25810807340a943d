package fsmvet

import (
	"go/ast"
	"go/token"
	"go/types"
	"slices"
)

// funcRef is a function whose body the analysis reads: a handler, or a
// function that returns a handler's result.
type funcRef struct {
	key  any // *types.Func or *ast.FuncLit
	body *ast.BlockStmt
	typ  *ast.FuncType
}

// handlerSet is the functions that a handler expression may be; open says
// that it may also be one the analysis cannot read.
type handlerSet struct {
	refs []*funcRef
	open bool
}

func (s *handlerSet) add(o handlerSet) {
	for _, r := range o.refs {
		if !slices.Contains(s.refs, r) {
			s.refs = append(s.refs, r)
		}
	}
	s.open = s.open || o.open
}

// handlersOf returns the functions that handler expression e may be: a
// function, a method value, a function literal, a variable or parameter
// that holds one of those, or the result of a function that returns one.
func (c *checker) handlersOf(e ast.Expr) handlerSet {
	e = ast.Unparen(e)
	if tv, ok := c.info.Types[e]; ok && tv.IsNil() {
		return handlerSet{}
	}
	switch e := e.(type) {
	case *ast.FuncLit:
		return handlerSet{refs: []*funcRef{c.ref(e, e.Body, e.Type)}}
	case *ast.IndexExpr:
		return c.handlersOf(e.X)
	case *ast.IndexListExpr:
		return c.handlersOf(e.X)
	case *ast.Ident:
		switch obj := c.info.Uses[e].(type) {
		case *types.Func:
			return c.funcHandler(obj)
		case *types.Var:
			return c.handlersOfVar(obj)
		}
	case *ast.SelectorExpr:
		if sel, ok := c.info.Selections[e]; ok {
			switch obj := sel.Obj().(type) {
			case *types.Func:
				if sel.Kind() == types.MethodVal {
					return c.funcHandler(obj)
				}
			case *types.Var:
				return c.handlersOfVar(obj)
			}
			break
		}
		if fn, ok := c.info.Uses[e.Sel].(*types.Func); ok {
			return c.funcHandler(fn)
		}
	case *ast.CallExpr:
		if tv, ok := c.info.Types[e.Fun]; ok && tv.IsType() && len(e.Args) == 1 {
			return c.handlersOf(e.Args[0]) // fsm.Handler[T](f)
		}
		if fn := c.callee(e); fn != nil && c.decls[fn] != nil {
			return c.handlersReturned(fn)
		}
	}
	return handlerSet{open: true}
}

func (c *checker) ref(key any, body *ast.BlockStmt, typ *ast.FuncType) *funcRef {
	if r, ok := c.refs[key]; ok {
		return r
	}
	r := &funcRef{key: key, body: body, typ: typ}
	c.refs[key] = r
	return r
}

// funcHandler is a function or method of the package used as a handler.
func (c *checker) funcHandler(fn *types.Func) handlerSet {
	fn = fn.Origin()
	decl := c.decls[fn]
	if decl == nil {
		return handlerSet{open: true}
	}
	return handlerSet{refs: []*funcRef{c.ref(fn, decl.Body, decl.Type)}}
}

func (c *checker) handlersOfVar(v *types.Var) handlerSet {
	return c.handlers.get(v, func() handlerSet {
		var set handlerSet
		for _, val := range c.valuesOf(v) {
			if val.expr == nil || val.index >= 0 {
				set.open = true
				continue
			}
			set.add(c.handlersOf(val.expr))
		}
		set.open = set.open || c.addressed[v]
		return set
	})
}

// handlersReturned is the handlers that a function of the package returns,
// such as a closure it makes.
func (c *checker) handlersReturned(fn *types.Func) handlerSet {
	return c.handlers.get(returnedKey{fn}, func() handlerSet {
		var set handlerSet
		for _, e := range returnedExprs(c.decls[fn].Body) {
			set.add(c.handlersOf(e))
		}
		return set
	})
}

type returnedKey struct{ fn *types.Func }

// summary is what a function can return as its result of type fsm.Result,
// as far as the analysis can read it.
type summary struct {
	nexts []*nextSite
	// unknown says that some result comes from code the analysis cannot
	// read: it may be a Next to anywhere.
	unknown bool
	// imprecise says that the code reads the request's State in a way the
	// analysis does not follow, so the guards of its Nexts are unknown.
	imprecise bool
}

// nextSite is one fsm.Next that a function returns.
type nextSite struct {
	call    *ast.CallExpr
	events  []string
	exprs   []ast.Expr
	dynamic bool // some event is not a constant
	// allowed is the states from which this Next can be returned, as
	// the function's tests of r.State tell.
	allowed guard
}

func (s *summary) merge(o *summary, g guard) {
	for _, n := range o.nexts {
		m := *n
		m.allowed = g.and(n.allowed)
		s.nexts = append(s.nexts, &m)
	}
	s.unknown = s.unknown || o.unknown
	s.imprecise = s.imprecise || o.imprecise
}

type summaryKey struct {
	body  *ast.BlockStmt
	index int
}

// handlerSummary is what a handler returns.
func (c *checker) handlerSummary(ref *funcRef) *summary {
	return c.summary(ref.body, ref.typ, 0)
}

// summary is what the function with body and type returns as its
// result number index.
func (c *checker) summary(body *ast.BlockStmt, typ *ast.FuncType, index int) *summary {
	key := summaryKey{body, index}
	if s, ok := c.summaries[key]; ok {
		if s == nil {
			return &summary{unknown: true} // recursion
		}
		return s
	}
	c.summaries[key] = nil
	f := c.flowOf(body, typ)
	s := &summary{imprecise: f.imprecise}
	for _, r := range f.returns {
		switch len(r.ret.Results) {
		case 0:
			if index < len(f.named) {
				c.resultVar(s, f, f.named[index], r.g, map[*types.Var]bool{})
			} else {
				s.unknown = true
			}
		case f.nresults:
			c.result(s, f, r.ret.Results[index], -1, r.g, map[*types.Var]bool{})
		case 1:
			c.result(s, f, r.ret.Results[0], index, r.g, map[*types.Var]bool{})
		default:
			s.unknown = true
		}
	}
	c.summaries[key] = s
	return s
}

// result adds to s what expression e, returned under guard g, may be: e
// itself, or its result number index when e is a call that returns
// several.
func (c *checker) result(s *summary, f *flow, e ast.Expr, index int, g guard, seen map[*types.Var]bool) {
	e = ast.Unparen(e)
	if index >= 0 {
		call, ok := e.(*ast.CallExpr)
		if !ok {
			s.unknown = true
			return
		}
		if decl := c.decls[c.callee(call)]; decl != nil {
			s.merge(c.summary(decl.Body, decl.Type, index), g)
			return
		}
		s.unknown = true
		return
	}
	switch e := e.(type) {
	case *ast.CallExpr:
		fn := c.callee(e)
		switch fsmFunc(fn) {
		case "Next":
			s.nexts = append(s.nexts, c.next(e, g))
			return
		case "Wait", "Done", "Fail", "Stop":
			return
		}
		if lit, ok := ast.Unparen(e.Fun).(*ast.FuncLit); ok {
			s.merge(c.summary(lit.Body, lit.Type, 0), g)
			return
		}
		if decl := c.decls[fn]; decl != nil {
			s.merge(c.summary(decl.Body, decl.Type, 0), g)
			return
		}
	case *ast.CompositeLit:
		if isFSMType(c.info.TypeOf(e), "Result") {
			return // fsm.Result{}, which kfsm treats as a failure
		}
	case *ast.Ident:
		if v, ok := c.info.Uses[e].(*types.Var); ok && f.local(v) {
			c.resultVar(s, f, v, g, seen)
			return
		}
	}
	s.unknown = true
}

// resultVar adds to s what the function's local variable v may hold.
func (c *checker) resultVar(s *summary, f *flow, v *types.Var, g guard, seen map[*types.Var]bool) {
	if f.addr[v] || seen[v] {
		s.unknown = true
		return
	}
	seen[v] = true
	defer delete(seen, v)
	for _, a := range f.assigns[v] {
		if a.expr == nil {
			s.unknown = true
			continue
		}
		c.result(s, f, a.expr, a.index, g.and(a.g), seen)
	}
}

// next reads the events of a call of fsm.Next.
func (c *checker) next(call *ast.CallExpr, g guard) *nextSite {
	n := &nextSite{call: call, allowed: g}
	args := call.Args
	if call.Ellipsis.IsValid() && len(args) > 0 {
		lit, ok := ast.Unparen(args[len(args)-1]).(*ast.CompositeLit)
		if !ok {
			n.dynamic = true
			return n
		}
		args = append(args[:len(args)-1:len(args)-1], lit.Elts...)
	}
	for _, a := range args {
		s, ok := c.stateConst(a)
		if !ok {
			n.dynamic = true
			return n
		}
		n.events = append(n.events, s)
		n.exprs = append(n.exprs, a)
	}
	n.dynamic = len(n.events) == 0
	return n
}

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
