package fsmvet

import (
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// checker holds what the analysis of one package learns.
type checker struct {
	pass *analysis.Pass
	info *types.Info

	// The package's functions and methods with a body, by their object.
	decls map[*types.Func]*ast.FuncDecl
	// The calls of each of the package's functions.
	callers map[*types.Func][]*ast.CallExpr
	// Functions used other than by calling them: unknown code may call them.
	escaped map[*types.Func]bool
	// The parameters of the package's functions: function and position.
	params map[*types.Var]param
	// Every value assigned to a variable or field in the package; a nil
	// expression is a value the analysis cannot read.
	values map[*types.Var][]value
	// Variables whose address is taken: anything may change them.
	addressed map[*types.Var]bool
	// Every call in the package, in source order.
	calls []*ast.CallExpr

	machines  []*machine
	byNew     map[*ast.CallExpr]*machine
	states    []*stateDecl
	sharing   map[any][]*stateDecl // states by handler
	machineOf *memo[machineSet]
	handlers  *memo[handlerSet]
	refs      map[any]*funcRef
	flows     map[*ast.BlockStmt]*flow
	summaries map[summaryKey]*summary
	reported  map[string]bool
}

type param struct {
	fn       *types.Func
	index    int
	variadic bool
}

type value struct {
	expr  ast.Expr
	index int // the position in a tuple that expr returns, or -1
}

// machine is one fsm.New call and what the package declares on it.
type machine struct {
	call     *ast.CallExpr
	typ      types.Type
	name     string // empty when it is not constant
	states   []*stateDecl
	versions []versionDecl
	// versionsKnown is false when a Version call has a version or a
	// migration that is not constant.
	versionsKnown bool
	initials      []string
	onDeletes     []string
	// edgesKnown is false when an Initial or OnDelete names a state that
	// is not constant.
	edgesKnown bool
	// open says that states may be declared where the analysis cannot
	// see: the machine was passed to code outside the package, or a
	// State call's machine could not be traced.
	open bool
	// current is the machine of the package's code that m is an earlier
	// version of, when m is one kept in a test file.
	current *machine
}

func (m *machine) names() []string {
	names := make([]string, 0, len(m.states))
	for _, d := range m.states {
		names = append(names, d.name)
	}
	return names
}

// deletionPath is the states that m's deletion states lead to, by the
// exits, timeout and retries edges that the analysis reads, themselves
// included.
func (m *machine) deletionPath() map[string]bool {
	path := map[string]bool{}
	next := slices.Clone(m.onDeletes)
	for len(next) > 0 {
		s := next[len(next)-1]
		next = next[:len(next)-1]
		if path[s] {
			continue
		}
		path[s] = true
		for _, d := range m.states {
			if d.name == s {
				next = append(append(next, d.exits...), d.edgeTargets...)
			}
		}
	}
	return path
}

func (m *machine) namesKnown() bool {
	for _, d := range m.states {
		if !d.nameKnown {
			return false
		}
	}
	return true
}

// stateDecl is one State call.
type stateDecl struct {
	call      *ast.CallExpr
	at        ast.Node // the name State in the call, where the state is declared
	name      string
	nameKnown bool

	handler      ast.Expr
	funcs        []*funcRef
	handlerKnown bool

	exits      []string
	exitExprs  []ast.Expr
	exitsKnown bool
	toCall     *ast.CallExpr // the last fsm.To of the state

	edgeTargets  []string // timeout and retries edges
	targetsKnown bool

	machines []*machine
	open     bool // the state may belong to a machine the analysis does not know
}

// mayShareMachine reports whether d and o may be declared on one machine:
// they are on one, or the analysis does not know all of the machines of
// either.
func (d *stateDecl) mayShareMachine(o *stateDecl) bool {
	if d.open || o.open || len(d.machines) == 0 || len(o.machines) == 0 {
		return true
	}
	return slices.ContainsFunc(d.machines, func(m *machine) bool { return slices.Contains(o.machines, m) })
}

// machineSet is the machines an expression may denote; open says that it
// may also denote one the analysis does not know.
type machineSet struct {
	ms   []*machine
	open bool
}

func (s *machineSet) add(o machineSet) {
	for _, m := range o.ms {
		if !slices.Contains(s.ms, m) {
			s.ms = append(s.ms, m)
		}
	}
	s.open = s.open || o.open
}

func newChecker(pass *analysis.Pass) *checker {
	return &checker{
		pass: pass, info: pass.TypesInfo,
		decls: map[*types.Func]*ast.FuncDecl{}, callers: map[*types.Func][]*ast.CallExpr{},
		escaped: map[*types.Func]bool{}, params: map[*types.Var]param{},
		values: map[*types.Var][]value{}, addressed: map[*types.Var]bool{},
		byNew: map[*ast.CallExpr]*machine{}, sharing: map[any][]*stateDecl{},
		machineOf: newMemo[machineSet](), handlers: newMemo[handlerSet](), refs: map[any]*funcRef{},
		flows: map[*ast.BlockStmt]*flow{}, summaries: map[summaryKey]*summary{},
		reported: map[string]bool{},
	}
}

// index records, across the package, the functions, their calls and
// parameters, and every value assigned to a variable or a field.
func (c *checker) index() {
	called := map[*ast.Ident]bool{}
	for _, f := range c.pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				fn, ok := c.info.Defs[n.Name].(*types.Func)
				if !ok || n.Body == nil {
					return true
				}
				c.decls[fn] = n
				sig := fn.Signature()
				for i := range sig.Params().Len() {
					c.params[sig.Params().At(i)] = param{fn: fn, index: i, variadic: sig.Variadic() && i == sig.Params().Len()-1}
				}
			case *ast.CallExpr:
				c.calls = append(c.calls, n)
				if fn := c.callee(n); fn != nil {
					c.callers[fn] = append(c.callers[fn], n)
					called[calleeIdent(n.Fun)] = true
				}
			case *ast.Ident:
				if fn, ok := c.info.Uses[n].(*types.Func); ok && !called[n] {
					c.escaped[fn.Origin()] = true
				}
			case *ast.AssignStmt:
				c.assign(n.Lhs, n.Rhs)
			case *ast.ValueSpec:
				lhs := make([]ast.Expr, len(n.Names))
				for i, id := range n.Names {
					lhs[i] = id
				}
				if len(n.Values) > 0 {
					c.assign(lhs, n.Values)
				}
			case *ast.RangeStmt:
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if v := c.varOf(e); v != nil {
						c.values[v] = append(c.values[v], value{index: -1})
					}
				}
			case *ast.UnaryExpr:
				if v := c.varOf(n.X); v != nil && n.Op == token.AND {
					c.addressed[v] = true
				}
			case *ast.CompositeLit:
				c.structFields(n)
			}
			return true
		})
	}
}

func (c *checker) assign(lhs, rhs []ast.Expr) {
	for i, l := range lhs {
		v := c.varOf(l)
		if v == nil {
			continue
		}
		switch {
		case len(lhs) == len(rhs):
			c.values[v] = append(c.values[v], value{expr: rhs[i], index: -1})
		case len(rhs) == 1:
			c.values[v] = append(c.values[v], value{expr: rhs[0], index: i})
		}
	}
}

// structFields records the fields that a struct literal sets.
func (c *checker) structFields(lit *ast.CompositeLit) {
	t, ok := types.Unalias(c.info.TypeOf(lit)).Underlying().(*types.Struct)
	if !ok {
		return
	}
	for i, elt := range lit.Elts {
		if kv, ok := elt.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok {
				if v, ok := c.info.Uses[id].(*types.Var); ok {
					c.values[v] = append(c.values[v], value{expr: kv.Value, index: -1})
				}
			}
			continue
		}
		if i < t.NumFields() {
			c.values[t.Field(i)] = append(c.values[t.Field(i)], value{expr: elt, index: -1})
		}
	}
}

// varOf returns the variable or field that e names, if it names one.
func (c *checker) varOf(e ast.Expr) *types.Var {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		v, _ := c.info.ObjectOf(e).(*types.Var)
		return v
	case *ast.SelectorExpr:
		if sel, ok := c.info.Selections[e]; ok && sel.Kind() == types.FieldVal {
			v, _ := sel.Obj().(*types.Var)
			return v
		}
		v, _ := c.info.Uses[e.Sel].(*types.Var) // a package's variable
		return v
	}
	return nil
}

// callee returns the function or method that call calls statically, as
// declared (generic, not instantiated).
func (c *checker) callee(call *ast.CallExpr) *types.Func {
	fn := typeutil.StaticCallee(c.info, call)
	if fn == nil {
		return nil
	}
	return fn.Origin()
}

func calleeIdent(fun ast.Expr) *ast.Ident {
	switch f := ast.Unparen(fun).(type) {
	case *ast.IndexExpr:
		return calleeIdent(f.X)
	case *ast.IndexListExpr:
		return calleeIdent(f.X)
	case *ast.Ident:
		return f
	case *ast.SelectorExpr:
		return f.Sel
	}
	return nil
}

// fsmFunc returns the name of fn when it is a function of package fsm.
func fsmFunc(fn *types.Func) string {
	if fn == nil || fn.Pkg() == nil || fn.Pkg().Path() != fsmPath || fn.Signature().Recv() != nil {
		return ""
	}
	return fn.Name()
}

// machineMethod returns the name of fn when it is a method of fsm.Machine.
func machineMethod(fn *types.Func) string {
	if fn == nil || fn.Signature().Recv() == nil || !isMachine(fn.Signature().Recv().Type()) {
		return ""
	}
	return fn.Name()
}

// isMachine reports whether t is fsm.Machine or a pointer to it.
func isMachine(t types.Type) bool { return isFSMType(t, "Machine") }

func isFSMType(t types.Type, name string) bool {
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Origin().Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == fsmPath && obj.Name() == name
}

// inKfsm reports whether pkg is one of kfsm's own, which never declare
// states on a machine they are given.
func inKfsm(pkg *types.Package) bool {
	return pkg != nil && strings.HasPrefix(pkg.Path()+"/", "github.com/kfsm/kfsm/")
}

// stateConst returns the constant state that e denotes.
func (c *checker) stateConst(e ast.Expr) (string, bool) {
	tv, ok := c.info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", false
	}
	return constant.StringVal(tv.Value), true
}

// declarations finds the machines, in source order, then the states,
// initial and deletion states declared on them.
func (c *checker) declarations() {
	for _, call := range c.calls {
		if fsmFunc(c.callee(call)) == "New" {
			m := &machine{call: call, typ: c.info.TypeOf(call), edgesKnown: true, versionsKnown: true}
			if len(call.Args) > 0 {
				m.name, _ = c.stateConst(call.Args[0])
			}
			c.machines = append(c.machines, m)
			c.byNew[call] = m
		}
	}
	if len(c.machines) == 0 && !c.anyBuilderCall() {
		return
	}
	for _, call := range c.calls {
		fn := c.callee(call)
		switch machineMethod(fn) {
		case "State", "Initial", "OnDelete", "Version":
		default:
			c.passedOut(call, fn)
			continue
		}
		sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
		if !ok {
			continue
		}
		set := c.machinesOf(sel.X)
		if set.open || len(set.ms) == 0 {
			// A machine the analysis lost track of, or one that reaches
			// this call by a way it does not follow (an interface, another
			// package): any machine of the type may be it.
			c.openAlike(c.info.TypeOf(sel.X))
		}
		switch fn.Name() {
		case "State":
			c.state(call, sel.Sel, set)
		case "Version":
			c.version(call, set)
		case "Initial", "OnDelete":
			s, ok := c.stateConst(call.Args[0])
			for _, m := range set.ms {
				switch {
				case !ok:
					m.edgesKnown = false
				case fn.Name() == "Initial":
					m.initials = append(m.initials, s)
				default:
					m.onDeletes = append(m.onDeletes, s)
				}
			}
		}
	}
}

func (c *checker) anyBuilderCall() bool {
	for _, call := range c.calls {
		if machineMethod(c.callee(call)) == "State" {
			return true
		}
	}
	return false
}

// passedOut marks open the machines that call passes to code that the
// analysis cannot read and that is not kfsm's.
func (c *checker) passedOut(call *ast.CallExpr, fn *types.Func) {
	if fn != nil && (c.decls[fn] != nil || inKfsm(fn.Pkg())) {
		return
	}
	if tv, ok := c.info.Types[call.Fun]; ok && tv.IsType() {
		return // a conversion
	}
	for _, arg := range call.Args {
		if t := c.info.TypeOf(arg); t != nil && isMachine(t) {
			for _, m := range c.machinesOf(arg).ms {
				m.open = true
			}
		}
	}
}

// openAlike marks open every machine that a value of type t may be.
func (c *checker) openAlike(t types.Type) {
	for _, m := range c.machines {
		if t == nil || types.Identical(t, m.typ) || hasTypeParam(t) {
			m.open = true
		}
	}
}

func hasTypeParam(t types.Type) bool {
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return true
	}
	for i := range n.TypeArgs().Len() {
		if _, ok := types.Unalias(n.TypeArgs().At(i)).(*types.TypeParam); ok {
			return true
		}
	}
	return false
}

// state records a State call on the machines of set.
func (c *checker) state(call *ast.CallExpr, at ast.Node, set machineSet) {
	d := &stateDecl{call: call, at: at, machines: set.ms, open: set.open, exitsKnown: true, targetsKnown: true}
	if len(call.Args) >= 2 {
		d.name, d.nameKnown = c.stateConst(call.Args[0])
		d.handler = call.Args[1]
		hs := c.handlersOf(d.handler)
		d.funcs, d.handlerKnown = hs.refs, !hs.open
	}
	if call.Ellipsis.IsValid() {
		d.exitsKnown, d.targetsKnown = false, false
	} else if len(call.Args) > 2 {
		for _, opt := range call.Args[2:] {
			c.option(d, opt)
		}
	}
	c.states = append(c.states, d)
	for _, m := range set.ms {
		m.states = append(m.states, d)
	}
	for _, ref := range d.funcs {
		c.sharing[ref.key] = append(c.sharing[ref.key], d)
	}
}

// option reads one option of a State call.
func (c *checker) option(d *stateDecl, opt ast.Expr) {
	call, ok := ast.Unparen(opt).(*ast.CallExpr)
	if !ok {
		d.exitsKnown, d.targetsKnown = false, false
		return
	}
	switch fsmFunc(c.callee(call)) {
	case "To":
		d.toCall = call
		args := call.Args
		if call.Ellipsis.IsValid() {
			lit, ok := ast.Unparen(args[len(args)-1]).(*ast.CompositeLit)
			if !ok {
				d.exitsKnown = false
				return
			}
			args = append(args[:len(args)-1:len(args)-1], lit.Elts...)
		}
		for _, a := range args {
			s, ok := c.stateConst(a)
			if !ok {
				d.exitsKnown = false
				continue
			}
			d.exits = append(d.exits, s)
			d.exitExprs = append(d.exitExprs, a)
		}
	case "Timeout", "RetriesThen":
		if len(call.Args) < 2 {
			return
		}
		if s, ok := c.stateConst(call.Args[1]); ok {
			d.edgeTargets = append(d.edgeTargets, s)
		} else {
			d.targetsKnown = false
		}
	case "Final", "Retries":
	default:
		// An option of the author's own may declare anything.
		d.exitsKnown, d.targetsKnown = false, false
	}
}

// machinesOf returns the machines that e may denote.
func (c *checker) machinesOf(e ast.Expr) machineSet {
	return c.machinesOfExpr(ast.Unparen(e))
}

func (c *checker) machinesOfExpr(e ast.Expr) machineSet {
	switch e := e.(type) {
	case *ast.CallExpr:
		fn := c.callee(e)
		if fsmFunc(fn) == "New" {
			if m := c.byNew[e]; m != nil {
				return machineSet{ms: []*machine{m}}
			}
		}
		if machineMethod(fn) != "" {
			// The builder's methods return their receiver.
			if sel, ok := ast.Unparen(e.Fun).(*ast.SelectorExpr); ok {
				return c.machinesOf(sel.X)
			}
			return machineSet{open: true}
		}
		if decl := c.decls[fn]; decl != nil {
			return c.machinesReturned(fn, decl)
		}
	case *ast.Ident, *ast.SelectorExpr:
		if v := c.varOf(e); v != nil {
			return c.machinesOfVar(v)
		}
	}
	return machineSet{open: true}
}

// machinesReturned returns the machines that fn's first result may be.
func (c *checker) machinesReturned(fn *types.Func, decl *ast.FuncDecl) machineSet {
	return c.machineOf.get(fn, func() machineSet {
		var set machineSet
		for _, e := range returnedExprs(decl.Body) {
			set.add(c.machinesOf(e))
		}
		return set
	})
}

// machinesOfVar returns the machines that variable, field or parameter v
// may hold.
func (c *checker) machinesOfVar(v *types.Var) machineSet {
	return c.machineOf.get(v, func() machineSet {
		var set machineSet
		for _, val := range c.valuesOf(v) {
			if val.expr == nil || val.index >= 0 {
				set.open = true
				continue
			}
			set.add(c.machinesOf(val.expr))
		}
		set.open = set.open || c.addressed[v]
		return set
	})
}

// valuesOf returns the values v may hold: what is assigned to it, and
// for a parameter, the arguments of the package's calls. A parameter of
// a function that unknown code may call, or of a function literal, holds
// values the analysis cannot read (a nil expression).
func (c *checker) valuesOf(v *types.Var) []value {
	vals := c.values[v]
	p, isParam := c.params[v]
	switch {
	case isParam && (p.variadic || c.escaped[p.fn]):
		vals = append(vals, value{index: -1})
	case isParam:
		for _, call := range c.callers[p.fn] {
			if p.index < len(call.Args) && !call.Ellipsis.IsValid() {
				vals = append(vals, value{expr: call.Args[p.index], index: -1})
			} else {
				vals = append(vals, value{index: -1})
			}
		}
	case isFuncParam(v):
		// A parameter of a function literal, or a result.
		vals = append(vals, value{index: -1})
	}
	return vals
}

// isFuncParam reports whether v is a parameter, result or receiver.
func isFuncParam(v *types.Var) bool {
	kind := v.Kind()
	return kind == types.ParamVar || kind == types.ResultVar || kind == types.RecvVar
}

// returnedExprs lists the first result of every return statement of a
// function body, outside the function literals it holds.
func returnedExprs(body *ast.BlockStmt) []ast.Expr {
	var out []ast.Expr
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.ReturnStmt:
			if len(n.Results) > 0 {
				out = append(out, n.Results[0])
			}
		}
		return true
	})
	return out
}
