package fsmtest

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest/internal/explore"
)

// Operator is a machine running under a real controller-runtime manager,
// the way operators run: its cache and controllers see only the test's
// namespace (and cluster-scoped objects), its writes are counted, and it
// runs until the test ends.
type Operator struct {
	e     *Env
	setup func(p *process, s *sharding.Shards) ([]func(manager.Manager) error, error)
	opts  runOptions

	hooks   *hooks       // with WithWebhooks
	install func() error // has the API server call the machine's webhooks

	mu      sync.Mutex
	procs   []*process // by replica
	started bool
	closed  bool
	faults  *explore.Faults
	// starting counts the processes starting now; renewed is the walk
	// from which a process that replaced another must have walked every
	// object to be caught up, or -1.
	starting, renewed int
	// replacing serializes the replacements of processes: a restart the
	// test asks for, and one after a crash.
	replacing sync.Mutex
}

// process is one process of the operator: under Replicas, one replica's.
type process struct {
	replica, n int    // from 0, and from 1 among the replica's processes
	identity   string // in its Lease, under Replicas: r<replica>-p<n>
	life       *life
	stop       func()
}

// RunOption changes how Run runs an operator.
type RunOption func(*runOptions)

type runOptions struct {
	also     []func(manager.Manager) error
	machines []func(*Env) func(manager.Manager) error
	manager  []func(*ctrl.Options)
	webhooks bool
	replicas int                      // shards the machine over this many processes, when more than one
	group    func(replica int) string // the replicas' sharding.Options.Name; see Replicas
}

// With registers more with the operator's manager: another machine's
// SetupWithManager, a runnable, a webhook.
func With(setup func(manager.Manager) error) RunOption {
	return func(o *runOptions) { o.also = append(o.also, setup) }
}

// WithMachine runs another machine in the same manager, observed like the
// first: its walks, its edge coverage, its children.
func WithMachine[T fsm.Object](m *fsm.Machine[T]) RunOption {
	return func(o *runOptions) {
		o.machines = append(o.machines, func(e *Env) func(manager.Manager) error {
			observe(m)
			e.watchKind(newObject[T](), m.OwnedTypes())
			e.noteResource(m.Name(), newObject[T]())
			return m.SetupWithManager
		})
	}
}

// WithManagerOptions changes the manager's options before it is made, for
// a resync period or a logger. The cache is fsm.LeanCache's unless change
// sets NewCache (cache.New for controller-runtime's own).
func WithManagerOptions(change func(*ctrl.Options)) RunOption {
	return func(o *runOptions) { o.manager = append(o.manager, change) }
}

// Run starts m under a manager of its own in e's namespace, and makes e's
// Await wait for it. The manager stops when the test ends; Restart sets
// the same m up in a new one.
func Run[T fsm.Object](e *Env, m *fsm.Machine[T], opts ...RunOption) *Operator {
	e.T.Helper()
	return RunFunc(e, func(*Env) *fsm.Machine[T] { return m }, opts...)
}

// RunFunc is Run with a machine that machine makes for each operator
// process: Restart, and a crash under Faults, make it anew, so that what
// the handlers keep in memory is lost as in a new process.
func RunFunc[T fsm.Object](e *Env, machine func(*Env) *fsm.Machine[T], opts ...RunOption) *Operator {
	e.T.Helper()
	o := newOperator(e, machine, nil, opts...)
	if err := o.start(); err != nil {
		e.T.Fatal(err)
	}
	return o
}

// newOperator prepares an operator of machine in e, to start; its first
// start arranges for it to stop when the test ends.
func newOperator[T fsm.Object](e *Env, machine func(*Env) *fsm.Machine[T], f *explore.Faults, opts ...RunOption) *Operator {
	o := &Operator{e: e, faults: f, renewed: -1}
	if f != nil {
		e.faults = f
	}
	o.setup = func(p *process, s *sharding.Shards) ([]func(manager.Manager) error, error) {
		m := machine(e)
		if s != nil {
			if e.processOf(m) != nil {
				return nil, fmt.Errorf("fsmtest: Replicas runs %d processes of the operator, and the machine function returned a machine it had returned before: make a new one on each call", len(o.procs))
			}
			m.Sharded(s)
		}
		e.bind(m, p)
		observe(m)
		e.watchKind(newObject[T](), m.OwnedTypes())
		e.noteResource(m.Name(), newObject[T]())
		if o.opts.webhooks && p.replica == 0 {
			o.install = func() error { return installHooks(o.hooks, e, m) }
			return []func(manager.Manager) error{m.SetupWithManager, m.SetupWebhookWithManager}, nil
		}
		return []func(manager.Manager) error{m.SetupWithManager}, nil
	}
	for _, opt := range opts {
		opt(&o.opts)
	}
	o.procs = make([]*process, max(1, o.opts.replicas))
	e.driver = o
	return o
}

// start starts the operator's processes: one, or one per replica.
func (o *Operator) start() error {
	o.mu.Lock()
	first := !o.started
	o.started = true
	o.mu.Unlock()
	if first {
		// The overlaps are checked once the operator stopped, with
		// every walk it made, the ones the test's end cut short
		// included; it stops before what it talks to, which the test
		// and the machine function registered.
		if len(o.procs) > 1 {
			o.e.T.Cleanup(o.e.overlaps)
		}
		o.e.T.Cleanup(o.Stop)
	}
	for i := range o.procs {
		if err := o.startProcess(i); err != nil {
			return err
		}
	}
	return nil
}

// startProcess starts a new process of replica i, in place of the one
// before, which has stopped.
func (o *Operator) startProcess(i int) error {
	p := &process{replica: i, n: 1}
	l := &life{faults: o.faults, onCrash: func() { o.crashed(p) }}
	p.life = l
	o.mu.Lock()
	prev := o.procs[i]
	if prev != nil {
		p.n = prev.n + 1
	}
	o.procs[i] = p
	o.starting++
	if prev != nil {
		o.renewed = o.e.walks.count()
	}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.starting--
		o.mu.Unlock()
	}()
	if prev != nil {
		o.e.actions.end(prev.life)
	}
	opts := ctrl.Options{
		Scheme:  o.e.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{o.e.Namespace: {}}},
		// Every test runs the same controllers in a manager of its own.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if o.opts.webhooks && i == 0 {
		if o.hooks == nil {
			h, err := newHooks(o.e)
			if err != nil {
				return err
			}
			o.hooks = h
		}
		opts.WebhookServer = o.hooks.server()
	}
	if m := o.e.mapper; m != nil {
		opts.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return m, nil }
	}
	for _, change := range o.opts.manager {
		change(&opts)
	}
	// The cache that kfsm init gives an operator (no managed fields, the
	// namespaces it watches known to the machine's catch-up), unless the
	// test makes its own.
	if opts.NewCache == nil {
		fsm.LeanCache(&opts)
	}
	cfg := o.e.operatorConfig(l)
	shards, err := o.shards(p, cfg, &opts)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("fsmtest: making the manager: %w", err)
	}
	setups, err := o.setup(p, shards)
	if err != nil {
		return err
	}
	setups = append(setups, o.opts.also...)
	for _, m := range o.opts.machines {
		setups = append(setups, m(o.e))
	}
	for _, s := range setups {
		if err := s(mgr); err != nil {
			return fmt.Errorf("fsmtest: setting up the manager: %w", err)
		}
	}
	return o.run(p, mgr)
}

// shards prepares a replica's manager to shard the machine, under
// Replicas: its process gets an identity of its own, as a new Pod would.
func (o *Operator) shards(p *process, cfg *rest.Config, opts *ctrl.Options) (*sharding.Shards, error) {
	if len(o.procs) == 1 {
		return nil, nil
	}
	p.identity = fmt.Sprintf("r%d-p%d", p.replica, p.n)
	group := "fsmtest"
	if o.opts.group != nil {
		group = o.opts.group(p.replica)
	}
	s, err := sharding.New(cfg, opts, sharding.Options{
		Name: group, Namespace: o.e.Namespace, Identity: p.identity,
		LeaseDuration: replicaLease, RenewDeadline: replicaLease * 3 / 4, RetryPeriod: replicaLease / 16,
	})
	if err != nil {
		return nil, fmt.Errorf("fsmtest: sharding replica %d: %w", p.replica, err)
	}
	return s, nil
}

// replicaLease is the LeaseDuration of replicas under Replicas: short, so
// that a crashed replica's objects move soon, and long enough that a
// replica of a loaded test process renews it in time.
const replicaLease = 4 * time.Second

// run starts p's manager, and returns once its cache has synced.
func (o *Operator) run(p *process, mgr manager.Manager) error {
	l := p.life
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	o.mu.Lock()
	p.stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !l.crashed.Load() {
				o.e.T.Errorf("fsmtest: the manager stopped: %v%s", err, o.e.api.refused())
			}
		case <-time.After(stopWithin):
			// controller-runtime waits forever for a cache that never
			// syncs, even once stopped.
			o.e.T.Errorf("fsmtest: the manager did not stop within %v%s", stopWithin, o.e.api.refused())
		}
	})
	o.mu.Unlock()
	// The caches of the kinds the machine owns exist already (kfsm
	// indexes them); one that cannot sync, such as one the operator's role
	// may not list, fails here rather than in the first Await.
	syncCtx, cancelSync := context.WithTimeout(ctx, o.e.Timeout)
	defer cancelSync()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) && ctx.Err() == nil {
		// Such a manager never stops: leave it, cancelled, with the
		// informers of the machine's kinds removed, whose open watches
		// would hold up the API server's stop.
		for _, gvk := range append(o.e.parentKinds(), o.e.childKinds()...) {
			if obj, err := o.e.Scheme.New(gvk); err == nil {
				_ = mgr.GetCache().RemoveInformer(context.Background(), obj.(client.Object))
			}
		}
		o.mu.Lock()
		p.stop = cancel
		o.mu.Unlock()
		return fmt.Errorf("fsmtest: the operator's cache did not sync within %v%s", o.e.Timeout, o.e.api.refused())
	}
	if o.install != nil && p.replica == 0 {
		return o.install()
	}
	return nil
}

// stopWithin bounds how long stopping a manager may take.
const stopWithin = 30 * time.Second

// Stop stops the operator for good, as when its process ends: running
// reconciles finish and running actions are cancelled.
func (o *Operator) Stop() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.stopCurrent()
}

func (o *Operator) stopCurrent() {
	o.mu.Lock()
	procs := slices.Clone(o.procs)
	o.mu.Unlock()
	for _, p := range procs {
		o.stopProcess(p)
	}
}

func (o *Operator) stopProcess(p *process) {
	o.mu.Lock()
	var stop func()
	if p != nil {
		stop = p.stop
	}
	o.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Restart stops the operator and starts a new one, as a new process of
// the operator would start: nothing kfsm kept in memory survives. Under
// Replicas, every replica restarts.
func (o *Operator) Restart() {
	o.e.T.Helper()
	o.replacing.Lock()
	defer o.replacing.Unlock()
	o.stopCurrent()
	if err := o.start(); err != nil {
		o.e.T.Fatal(err)
	}
}

// crashed replaces a process that died in the middle of its work: under
// Replicas, that replica's alone.
func (o *Operator) crashed(p *process) {
	o.mu.Lock()
	closed := o.closed
	o.mu.Unlock()
	if closed {
		return
	}
	o.replacing.Lock()
	defer o.replacing.Unlock()
	o.mu.Lock()
	current := o.procs[p.replica] == p
	o.mu.Unlock()
	if !current {
		return // replaced already, by a restart
	}
	o.stopProcess(p)
	if err := o.startProcess(p.replica); err != nil {
		o.e.T.Errorf("fsmtest: restarting after the crash: %v", err)
	}
}

// RestartOperator stops the operator that Run, RunFunc or Faults started
// and starts a new process of it, as a rolling update does: the machine
// function runs anew, so that a scenario can move on to a new version of
// its machine (one that a flag of the test's own chooses). An operator
// that has not started yet, in a Bursts run, starts later made anew.
func (e *Env) RestartOperator() {
	e.T.Helper()
	o, ok := e.driver.(*Operator)
	if !ok {
		e.T.Fatal("fsmtest: RestartOperator needs an operator that Run, RunFunc or Faults started")
	}
	o.mu.Lock()
	started := o.started
	o.mu.Unlock()
	if started {
		o.Restart()
	}
}

// caughtUp reports whether the operator works as it will: no process of
// it has crashed and waits for its replacement, none is starting, and one
// that replaced another after a crash or a restart has walked every
// object since. Until then the dead process writes nothing and the new
// one is filling its caches, and their quiet is no rest. Replicas hold
// their objects' slots instead (see held).
func (o *Operator) caughtUp() bool {
	o.mu.Lock()
	starting, from, one := o.starting, o.renewed, len(o.procs) == 1
	for _, p := range o.procs {
		if p != nil && p.life.crashed.Load() && !o.closed {
			starting++ // its replacement is on its way; none once stopped
		}
	}
	o.mu.Unlock()
	switch {
	case starting > 0:
		return false
	case !one || from < 0:
		return true
	case !o.e.resynced(from):
		return false
	}
	o.mu.Lock()
	if o.renewed == from {
		o.renewed = -1
	}
	o.mu.Unlock()
	return true
}

// caughtUp reports whether the operator's processes are caught up; see
// Operator.caughtUp.
func (e *Env) caughtUp() bool {
	o, ok := e.driver.(*Operator)
	return !ok || o.caughtUp()
}

// await polls cond until it holds, the operator working meanwhile. In a
// faulty run of Faults, an operator on the fake clock that has nothing
// left to do but wait for a failure's backoff gets the clock moved to its
// end: the backoff after an injected fault is a wait that the scenario
// cannot know to make.
//
// In a run of Faults or Explore, an operator that has come to rest with
// cond not holding stays so: the test owns the fake clock and every
// outside system, and the backoffs are moved for it. Such a run fails
// once the operator has been at rest for restLimit, rather than at the
// timeout.
func (o *Operator) await(what string, cond func() (bool, string)) {
	o.e.T.Helper()
	start := time.Now()
	deadline := start.Add(o.e.Timeout)
	var (
		seen           activity
		since, checked time.Time // of the operator's last act, and of the last read of cond
		why            string
		acted          = true // since cond was last read
	)
	for {
		now := time.Now()
		a, busy := o.e.activity()
		changed := a != seen
		if changed {
			seen, acted = a, true
		}
		if changed || busy {
			since = now
		}
		// cond reads the API server: it is read again once the operator
		// acted, and after a while for what others change (the garbage
		// collector, a node). A run of Faults or Explore waits for the
		// operator to be quiet once cond holds, so it reads cond once the
		// operator paused rather than after each of its requests.
		paused := o.e.snap == nil || now.Sub(since) >= pause
		if acted && paused || now.Sub(checked) >= recheck {
			var ok bool
			if ok, why = cond(); ok {
				return
			}
			checked, acted = now, false
		}
		if now.After(deadline) {
			o.e.fatalf("waited %v for %s: %s%s", o.e.Timeout, what, why, o.e.clockHint())
		}
		if o.e.snap != nil && now.Sub(since) >= restLimit {
			o.e.fatalf("waited %v for %s, and the operator came to rest without it: %s%s", now.Sub(start).Round(time.Second), what, why, o.e.clockHint())
		}
		if o.e.snap.faulty() {
			o.e.toNextBackoff(o.e.snap.moment())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recheck is how often an Await reads what it waits for while the
// operator does nothing: it reads it at once after each act.
const recheck = 500 * time.Millisecond

// pause is how long an operator in a run of Faults or Explore does
// nothing before an Await reads what it waits for.
const pause = 100 * time.Millisecond

// restLimit is how long an operator in a run of Faults or Explore does
// nothing before an Await gives up on it: far longer than a replica's
// lease, a watch event's delay or a moment of a loaded machine.
const restLimit = 15 * time.Second

// activity is what the operator has done so far, as far as fsmtest sees
// it: its requests to the API server, walks and calls to outside systems,
// and the fake clock's time. busy says that it is doing something now: a
// request is in flight, or an action runs.
type activity struct {
	request      time.Time
	walks, calls int64
	clock        time.Time
}

func (e *Env) activity() (a activity, busy bool) {
	e.api.mu.Lock()
	a.request, busy = e.api.lastAt, e.api.flights > 0
	e.api.mu.Unlock()
	a.walks, a.calls, a.clock = int64(e.walks.count()), e.calls.Load(), e.Clock.Now()
	return a, busy || e.actions.runningAny()
}

// observe makes fsmtest see m's walks: for the counts of the test whose
// namespace the object is in, and for the package's edge coverage.
func observe[T fsm.Object](m *fsm.Machine[T]) {
	pkg.mu.Lock()
	defer pkg.mu.Unlock()
	if pkg.observed[m] {
		return
	}
	pkg.observed[m] = true
	// Tests may give one name to machines of different graphs; each graph
	// is covered on its own, under the name and a number.
	name := m.Name()
	for i := 2; pkg.profile.AddMachine(name, m.Graph()) != nil; i++ {
		name = fmt.Sprintf("%s#%d", m.Name(), i)
	}
	m.Observe(fsm.Observers[T]{Action: func(obj types.NamespacedName, name string, a fsm.Action) {
		if e := envOf(obj.Namespace); e != nil {
			e.actions.observe(obj, name, a, e.processOf(m))
		}
	}, Walk: func(_ context.Context, w fsm.Walk) {
		e := envOf(w.Object.Namespace)
		var p *process
		if e != nil {
			p = e.processOf(m)
		}
		if p != nil && p.life.crashed.Load() {
			// A crashed process, on its way out, reconciles on: in a
			// real crash it would run nothing more.
			return
		}
		if w.Committed {
			pkg.mu.Lock()
			for _, edge := range w.Edges {
				pkg.profile.Take(name, edge)
			}
			pkg.mu.Unlock()
		}
		if e != nil {
			e.observed(m.Name(), w, p)
		}
	}})
}

// envOf returns the Env of the test whose namespace is ns, or nil.
func envOf(ns string) *Env {
	pkg.mu.Lock()
	defer pkg.mu.Unlock()
	return pkg.envs[ns]
}

// newObject returns a new, empty T.
func newObject[T client.Object]() T {
	var zero T
	return reflect.New(reflect.TypeOf(zero).Elem()).Interface().(T)
}
