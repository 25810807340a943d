package fsmvet

import (
	"go/ast"
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
