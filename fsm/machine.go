package fsm

import (
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/graph"
)

// Handler does the work of one state and says what comes next.
type Handler[T Object] func(ctx context.Context, r *Request[T]) Result

// Mode says how a machine runs its graph; see Lifecycle and Pipeline.
type Mode = graph.Mode

const (
	// Lifecycle machines persist the current state and resume there on
	// every reconcile; cycles are allowed across reconciles.
	Lifecycle = graph.Lifecycle
	// Pipeline machines walk from the initial state on every reconcile
	// until a state waits, fails or is done; the graph must be acyclic.
	Pipeline = graph.Pipeline
)

// Machine declares a state machine for objects of type T and runs it. Build
// one with New and its methods, which read as a sentence:
//
//	fsm.New[*v1.Moose]("moose", fsm.Lifecycle).
//		Initial(Tagged).
//		State(Tagged, h.tag, fsm.To(Roaming)).
//		...
type Machine[T Object] struct {
	name          string
	mode          Mode
	initials      []State
	onDeletes     []State
	states        []*stateDef[T]
	owns          []client.Object
	ownsOpts      [][]builder.OwnsOption
	watches       []watch
	forOpts       []builder.ForOption
	filters       []predicate.Predicate
	options       controller.Options
	clock         clock.PassiveClock
	tracer        trace.TracerProvider
	historyLimit  int
	goal          func(T) State
	actionLimit   int
	workers       int
	slowAfter     time.Duration
	resync        time.Duration
	observers     []func(context.Context, T, Transition)
	walkObservers []func(context.Context, Walk)
	actionWatch   []func(types.NamespacedName, string, Action)
	redact        func(string) string
	noPublish     bool
	admission     Admission[T]
	shards        *sharding.Shards
	versions      map[int][]Migration

	built *built[T]
}

type stateDef[T Object] struct {
	name    State
	handler Handler[T]
	stateOptions

	// Set by Build, so that a step formats nothing.
	index                   int
	spanName, waiting, done string
	spanStart               trace.SpanStartOption // the state span's attributes
}

// choose picks the exit that a Next takes: among the events raised, the
// exit declared first, with Default standing for the last exit. Any event
// that is not an exit makes the whole Next illegal.
func (d *stateDef[T]) choose(res Result) (State, bool) {
	best := d.exitIndex(res.next)
	for _, ev := range res.also {
		i := d.exitIndex(ev)
		if i < 0 {
			return "", false
		}
		best = min(best, i)
	}
	if best < 0 {
		return "", false
	}
	return d.exits[best], true
}

func (d *stateDef[T]) exitIndex(event State) int {
	if event == Default {
		return len(d.exits) - 1
	}
	return slices.Index(d.exits, event)
}

// stateSet is a set of states by their index in the declaration, a bit
// each, so that a walk keeps track of states without allocating.
type stateSet struct {
	bits [2]uint64
	more map[int]bool // past 128 states
}

func (s *stateSet) add(i int) {
	if i < 128 {
		s.bits[i/64] |= 1 << (i % 64)
		return
	}
	if s.more == nil {
		s.more = map[int]bool{}
	}
	s.more[i] = true
}

func (s *stateSet) has(i int) bool {
	if i < 128 {
		return s.bits[i/64]&(1<<(i%64)) != 0
	}
	return s.more[i]
}

type watch struct {
	obj  client.Object
	fn   handler.MapFunc
	opts []builder.WatchesOption
}

// StateOption configures a state.
type StateOption func(*stateOptions)

type stateOptions struct {
	exits   []State
	final   bool
	timeout *graph.Timeout
	retries *graph.Retries
}

// To declares the states a state may move to, in priority order.
func To(states ...State) StateOption {
	return func(o *stateOptions) { o.exits = append(o.exits, states...) }
}

// Final marks a state that ends the walk. A final state has no exits and
// needs no handler; without one, reaching it means Done.
func Final() StateOption { return func(o *stateOptions) { o.final = true } }

// Timeout moves an object that stayed in the state longer than after to
// state to, whatever the handler says.
func Timeout(after time.Duration, to State) StateOption {
	return func(o *stateOptions) { o.timeout = &graph.Timeout{After: after, To: graph.State(to)} }
}

// Retries stalls an object once n attempts in the state have failed,
// instead of retrying for ever. The failures count from the time the
// object entered the state; a Wait between them does not reset the count,
// only Done, leaving the state, a new generation or a retry asked with
// AnnotationRetry do.
func Retries(n int) StateOption {
	return func(o *stateOptions) { o.retries = &graph.Retries{Limit: n} }
}

// RetriesThen moves an object to state to once n attempts in the state
// have failed, counted as for Retries.
func RetriesThen(n int, to State) StateOption {
	return func(o *stateOptions) { o.retries = &graph.Retries{Limit: n, To: graph.State(to)} }
}

// New starts the declaration of a machine. The name identifies the machine
// in metrics, events, logs, its finalizer and its field owner; use a short
// DNS label such as "moose".
func New[T Object](name string, mode Mode) *Machine[T] {
	return &Machine[T]{name: name, mode: mode, clock: clock.RealClock{}, historyLimit: defaultHistoryLimit, actionLimit: defaultActionLimit, slowAfter: defaultSlowAfter}
}

// Initial names the state where new objects start.
func (m *Machine[T]) Initial(s State) *Machine[T] {
	m.initials = append(m.initials, s)
	return m
}

// OnDelete names the state where the deletion path starts. Once an object
// is being deleted, kfsm leaves whatever state it was in and walks from
// here; it holds a finalizer until the path reaches a final state. Without
// OnDelete, kfsm adds no finalizer.
func (m *Machine[T]) OnDelete(s State) *Machine[T] {
	m.onDeletes = append(m.onDeletes, s)
	return m
}

// State declares a state, its handler and its exits.
func (m *Machine[T]) State(s State, h Handler[T], opts ...StateOption) *Machine[T] {
	def := &stateDef[T]{name: s, handler: h}
	for _, o := range opts {
		o(&def.stateOptions)
	}
	m.states = append(m.states, def)
	return m
}

// Owns declares obj's type as a type of children: handlers may apply and
// delete such children (see [Request.Apply]), and a change to one of them
// reconciles its parent, as controller-runtime's builder Owns does, also
// for a child that cannot carry an owner reference. opts are the
// builder's, such as builder.WithPredicates; they apply to the watch
// through owner references.
func (m *Machine[T]) Owns(obj client.Object, opts ...builder.OwnsOption) *Machine[T] {
	m.owns = append(m.owns, obj)
	m.ownsOpts = append(m.ownsOpts, opts)
	return m
}

// Watches reconciles the objects that fn returns whenever an object of
// type obj changes, for objects that are referenced but not owned: the
// equivalent of the builder's Watches with EnqueueRequestsFromMapFunc,
// with the builder's options.
func (m *Machine[T]) Watches(obj client.Object, fn handler.MapFunc, opts ...builder.WatchesOption) *Machine[T] {
	m.watches = append(m.watches, watch{obj: obj, fn: fn, opts: opts})
	return m
}

// ForOptions passes options to the watch of the machine's own objects:
// the equivalent of the options of the builder's For, such as
// builder.WithPredicates. A predicate that drops updates of annotations
// (GenerationChangedPredicate alone does) also delays AnnotationRetry and
// AnnotationPaused until the next change it lets through.
func (m *Machine[T]) ForOptions(opts ...builder.ForOption) *Machine[T] {
	m.forOpts = append(m.forOpts, opts...)
	return m
}

// WithEventFilter filters the events of every watch of the machine: the
// equivalent of the builder's WithEventFilter.
func (m *Machine[T]) WithEventFilter(p predicate.Predicate) *Machine[T] {
	m.filters = append(m.filters, p)
	return m
}

// WithOptions sets the options of the machine's controller, as the
// builder's WithOptions does: a rate limiter, a reconciliation timeout,
// leader election, and the rest. kfsm's backoff after a failed handler
// goes first; every other requeue is the given rate limiter's to time.
// [Tuning.Workers], when set, wins over MaxConcurrentReconciles.
func (m *Machine[T]) WithOptions(o controller.Options) *Machine[T] {
	m.options = o
	return m
}

// Goal makes the machine walk towards the state that goal returns for an
// object, for example its spec.desiredState; an empty answer means no
// goal. Handlers see the goal and the next hop of the shortest path in
// [Request.Goal] and [Request.NextHop] and move with Next(r.NextHop); at
// the goal, NextHop is empty and the object stays. A goal that is not a
// state, or that no path of declared exits leads to from where the object
// is, runs no handler: the object is Stalled with reason GoalUnreachable
// and a message saying why. Only lifecycle machines take a goal.
func (m *Machine[T]) Goal(goal func(T) State) *Machine[T] {
	m.goal = goal
	return m
}

// Observers are told what a machine does, for [Machine.Observe]. Each is
// optional; each runs in the machine's work, so it should be quick.
type Observers[T Object] struct {
	// Transition is called for every transition of an object, in order,
	// once the status that records it is written: a transition that a
	// failed write undid is not reported. The object carries its
	// apiVersion and kind. Use it to tell systems outside the cluster,
	// for example with a CloudEvent (package cesink). A crash between the
	// write and the call loses the call.
	Transition func(ctx context.Context, obj T, t Transition)
	// Walk is called after every reconcile that walked the machine's
	// graph, with what it did. Tests use it to see handler runs and edges
	// taken (fsmtest does).
	Walk func(ctx context.Context, w Walk)
	// Action is called when an action of the machine starts (with
	// ActionPending) and when it returns (ActionSucceeded or
	// ActionFailed), with the object and the action's name, in the
	// action's goroutine; an action cancelled by the object's deletion or
	// the manager's stop is not reported. It is for watching actions
	// (fsmtest counts them, and crashes inside them): the reconcile that
	// records an action's end comes through the controller's queue, or
	// without a manager through the one that starts [Machine.Reconciler].
	Action func(obj types.NamespacedName, name string, a Action)
}

// Observe adds o's observers to those of the machine: every observer
// added is called, in the order added.
func (m *Machine[T]) Observe(o Observers[T]) *Machine[T] {
	if o.Transition != nil {
		m.observers = append(m.observers, o.Transition)
	}
	if o.Walk != nil {
		m.walkObservers = append(m.walkObservers, o.Walk)
	}
	if o.Action != nil {
		m.actionWatch = append(m.actionWatch, o.Action)
	}
	return m
}

// Tuning holds a machine's knobs, for [Machine.Tune]. A field left zero
// keeps the default, or what an earlier Tune set.
type Tuning struct {
	// Workers is how many objects the machine reconciles at once:
	// controller-runtime's MaxConcurrentReconciles, which it wins over.
	// Zero is the manager's, 1 unless configured. An object is never
	// reconciled twice at once.
	Workers int
	// ActionLimit is how many asynchronous actions of the machine run at
	// once; more wait their turn. Zero means 4.
	ActionLimit int
	// HistoryLimit is how many transitions Status.History keeps, from 1
	// to 100 (the bound of the field); zero means 10. The latest
	// transition is always kept, since Request.From reads it.
	HistoryLimit int
	// SlowHandlerAfter is how long a handler may run before kfsm logs,
	// once per state and process, that it holds a reconcile worker (and
	// with one worker, every other object) and that long work belongs in
	// Request.Action. It is real time, whatever the machine's clock.
	// Zero means 5 seconds; a negative duration turns the log off.
	SlowHandlerAfter time.Duration
	// Resync reconciles objects that are done again about every period
	// (give or take a tenth, so that objects spread out), for handlers
	// that compare with something that sends no events, such as a
	// version server. A converged object stays Ready. Zero means no
	// resync.
	Resync time.Duration
	// TracerProvider is where spans go; nil means OpenTelemetry's global
	// provider.
	TracerProvider trace.TracerProvider
	// Redact filters every text that kfsm takes from a handler's error, a
	// panic or a Stop before it reaches a condition, an event, a log
	// line, a span or the error returned to controller-runtime: use it to
	// take out secrets that errors may carry, such as a connection string
	// with a password. kfsm applies it before truncating. What handlers
	// log or record themselves is theirs to filter.
	Redact func(string) string
}

// Defaults of Tuning's fields.
const (
	defaultActionLimit  = 4
	defaultHistoryLimit = 10
	defaultSlowAfter    = 5 * time.Second
)

// Tune sets the knobs that t sets; see [Tuning]. Build reports a knob
// out of its range.
func (m *Machine[T]) Tune(t Tuning) *Machine[T] {
	set(&m.workers, t.Workers)
	set(&m.actionLimit, t.ActionLimit)
	set(&m.historyLimit, t.HistoryLimit)
	set(&m.slowAfter, t.SlowHandlerAfter) // a negative one turns the log off
	set(&m.resync, t.Resync)
	set(&m.tracer, t.TracerProvider)
	if t.Redact != nil {
		m.redact = t.Redact
	}
	return m
}

// set sets *field to v, unless v is zero.
func set[V comparable](field *V, v V) {
	var zero V
	if v != zero {
		*field = v
	}
}

// resyncAfter is the requeue after a Done: the resync period, jittered.
func (m *Machine[T]) resyncAfter() time.Duration {
	if m.resync <= 0 {
		return 0
	}
	return m.resync + time.Duration((rand.Float64()*0.2-0.1)*float64(m.resync))
}

// WithClock sets the clock that handlers see and timeouts use; tests pass
// a fake one. The default is the real clock. Under a manager, a clock that
// is not the real one and can run functions later (a
// k8s.io/utils/clock/testing FakeClock) also times the machine's requeues:
// a Wait, a timeout or a backoff comes when the clock reaches it.
func (m *Machine[T]) WithClock(c clock.PassiveClock) *Machine[T] {
	m.clock = c
	return m
}

// OwnedTypes returns an empty object of each type declared with Owns, in
// order: the kinds of the machine's children.
func (m *Machine[T]) OwnedTypes() []client.Object {
	out := make([]client.Object, len(m.owns))
	for i, o := range m.owns {
		out[i] = o.DeepCopyObject().(client.Object)
	}
	return out
}

// Name returns the machine's name.
func (m *Machine[T]) Name() string { return m.name }

// Finalizer returns the finalizer kfsm puts on objects of a machine with
// an OnDelete state.
func (m *Machine[T]) Finalizer() string { return "kfsm.dev/" + m.name }

// FieldOwner returns the field manager name kfsm uses for its writes.
func (m *Machine[T]) FieldOwner() string { return "kfsm-" + m.name }

// newObject returns a new, empty T; T is a pointer to a struct.
func newObject[T Object]() T {
	var zero T
	return reflect.New(reflect.TypeOf(zero).Elem()).Interface().(T)
}
