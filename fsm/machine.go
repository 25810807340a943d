package fsm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

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

// Problems that Build finds beyond those of graph.Validate.
const (
	// NoHandler is a state that is not final and has no handler.
	NoHandler graph.ProblemCode = "NoHandler"
	// BadConditionType is a pipeline state whose name cannot be the type of
	// its condition: not a valid condition type, or one of Ready,
	// Reconciling and Stalled.
	BadConditionType graph.ProblemCode = "BadConditionType"
	// BadMachineName is a machine name that is not a DNS label; it goes
	// into the finalizer, the field owner and the labels of children.
	BadMachineName graph.ProblemCode = "BadMachineName"
	// ReservedState is a state named like the Default event.
	ReservedState graph.ProblemCode = "ReservedState"
	// GoalInPipeline is a goal on a pipeline machine, which starts from
	// its initial state on every reconcile and so walks towards nothing.
	GoalInPipeline graph.ProblemCode = "GoalInPipeline"
)

// conditionType is the pattern metav1.Condition requires of a type.
var conditionType = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`)

// Machine declares a state machine for objects of type T and runs it. Build
// one with New and its methods, which read as a sentence:
//
//	fsm.New[*v1.Moose]("moose", fsm.Lifecycle).
//		Initial(Tagged).
//		State(Tagged, h.tag, fsm.To(Roaming)).
//		...
type Machine[T Object] struct {
	name         string
	mode         Mode
	initials     []State
	onDeletes    []State
	states       []*stateDef[T]
	owns         []client.Object
	watches      []watch
	clock        clock.PassiveClock
	tracer       trace.TracerProvider
	historyLimit int
	goal         func(T) State
	actionLimit  int
	workers      int
	resync       time.Duration
	observers    []func(context.Context, T, Transition)

	built *built[T]
}

type stateDef[T Object] struct {
	name    State
	handler Handler[T]
	stateOptions

	// Set by Build, so that a step formats nothing.
	index                   int
	spanName, waiting, done string
}

type watch struct {
	obj client.Object
	fn  handler.MapFunc
}

// built is what Build derives from the declaration, for the runtime.
type built[T Object] struct {
	states   map[State]*stateDef[T]
	initial  State
	onDelete State
	deletion map[State]bool // states of the deletion path
	notes    map[[2]State]string
	metrics  *machineMetrics
	tracer   trace.Tracer
	hops     map[[2]State]State // from, goal → next hop, for goal machines
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

// Retries stalls an object once n attempts in the state have failed in a
// row, instead of retrying for ever.
func Retries(n int) StateOption {
	return func(o *stateOptions) { o.retries = &graph.Retries{Limit: n} }
}

// RetriesThen moves an object to state to once n attempts in the state have
// failed in a row.
func RetriesThen(n int, to State) StateOption {
	return func(o *stateOptions) { o.retries = &graph.Retries{Limit: n, To: graph.State(to)} }
}

// New starts the declaration of a machine. The name identifies the machine
// in metrics, events, logs, its finalizer and its field owner; use a short
// DNS label such as "moose".
func New[T Object](name string, mode Mode) *Machine[T] {
	return &Machine[T]{name: name, mode: mode, clock: clock.RealClock{}, historyLimit: 10, actionLimit: 4}
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
// for a child that cannot carry an owner reference.
func (m *Machine[T]) Owns(obj client.Object) *Machine[T] {
	m.owns = append(m.owns, obj)
	return m
}

// Watches reconciles the objects that fn returns whenever an object of
// type obj changes, for objects that are referenced but not owned.
func (m *Machine[T]) Watches(obj client.Object, fn handler.MapFunc) *Machine[T] {
	m.watches = append(m.watches, watch{obj: obj, fn: fn})
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

// CheckGoal reports whether an object in state from can reach goal
// through the declared exits: nil if so, else an error that says why. An
// empty from stands for the initial state. An admission webhook can use
// it to refuse a desired state that the object could never reach.
func (m *Machine[T]) CheckGoal(from, goal State) error {
	if b := m.built; b != nil && b.hops != nil && from != "" {
		// The walk asks on every reconcile: answer yes without a graph.
		if _, ok := b.hops[[2]State{from, goal}]; ok {
			return nil
		}
		if _, ok := b.states[goal]; ok && from == goal {
			return nil
		}
	}
	g := m.Graph()
	if from == "" {
		from = State(g.Initial())
	}
	if _, ok := g.Lookup(graph.State(goal)); !ok {
		return fmt.Errorf("goal %s is not a state of machine %s (states: %s)", goal, m.name, joinStates(m.stateNames()))
	}
	if _, ok := g.Lookup(graph.State(from)); !ok {
		return fmt.Errorf("state %s is not a state of machine %s", from, m.name)
	}
	if g.Reachable(graph.State(from), graph.State(goal)) {
		return nil
	}
	var reach []State
	for _, s := range g.States {
		if s.Name != graph.State(from) && g.Reachable(graph.State(from), s.Name) {
			reach = append(reach, State(s.Name))
		}
	}
	if len(reach) == 0 {
		return fmt.Errorf("no path leads from state %s to goal %s: %s has no way out through declared exits", from, goal, from)
	}
	return fmt.Errorf("no path leads from state %s to goal %s through the declared exits; from %s the machine can reach only %s", from, goal, from, joinStates(reach))
}

// ActionLimit sets how many asynchronous actions of the machine run at
// once; more wait their turn. The default is 4.
func (m *Machine[T]) ActionLimit(n int) *Machine[T] {
	m.actionLimit = n
	return m
}

// Workers sets how many objects the machine reconciles at once: the
// equivalent of controller-runtime's MaxConcurrentReconciles. The default
// is the manager's, 1 unless configured. An object is never reconciled
// twice at once.
func (m *Machine[T]) Workers(n int) *Machine[T] {
	m.workers = n
	return m
}

// OnTransition calls observe for every transition of an object, in
// order, once the status that records it is written: a transition that a
// failed write undid is not reported. Use it to tell systems outside the
// cluster, for example with a CloudEvent; observe runs in the reconcile,
// so it should be quick. A crash between the write and the call loses the
// call.
func (m *Machine[T]) OnTransition(observe func(ctx context.Context, obj T, t Transition)) *Machine[T] {
	m.observers = append(m.observers, observe)
	return m
}

// Resync reconciles objects that are done again about every period (give
// or take a tenth, so that objects spread out), for handlers that compare
// with something that does not send events, such as a version server. A
// converged object stays Ready; the default is no resync.
func (m *Machine[T]) Resync(every time.Duration) *Machine[T] {
	m.resync = every
	return m
}

// resyncAfter is the requeue after a Done: the resync period, jittered.
func (m *Machine[T]) resyncAfter() time.Duration {
	if m.resync <= 0 {
		return 0
	}
	return m.resync + time.Duration((rand.Float64()*0.2-0.1)*float64(m.resync))
}

// WithClock sets the clock that handlers see and timeouts use; tests pass
// a fake one. The default is the real clock.
func (m *Machine[T]) WithClock(c clock.PassiveClock) *Machine[T] {
	m.clock = c
	return m
}

// WithTracerProvider sets where spans go; the default is OpenTelemetry's
// global provider.
func (m *Machine[T]) WithTracerProvider(tp trace.TracerProvider) *Machine[T] {
	m.tracer = tp
	return m
}

// HistoryLimit sets how many transitions Status.History keeps; the
// default is 10.
func (m *Machine[T]) HistoryLimit(n int) *Machine[T] {
	m.historyLimit = n
	return m
}

// Name returns the machine's name.
func (m *Machine[T]) Name() string { return m.name }

// Finalizer returns the finalizer kfsm puts on objects of a machine with
// an OnDelete state.
func (m *Machine[T]) Finalizer() string { return "kfsm.dev/" + m.name }

// FieldOwner returns the field manager name kfsm uses for its writes.
func (m *Machine[T]) FieldOwner() string { return "kfsm-" + m.name }

// Graph returns the machine's graph, for drawing and inspection.
func (m *Machine[T]) Graph() *graph.Graph {
	g := &graph.Graph{Name: m.name, Mode: m.mode}
	for _, s := range m.states {
		g.States = append(g.States, graph.StateSpec{
			Name:     graph.State(s.name),
			Initial:  slices.Contains(m.initials, s.name),
			Final:    s.final,
			OnDelete: slices.Contains(m.onDeletes, s.name),
			Exits:    toGraphStates(s.exits),
			Timeout:  s.timeout,
			Retries:  s.retries,
		})
	}
	return g
}

// Build checks the declaration and prepares the machine to run. It returns
// a *graph.ValidationError that lists every problem at once. Building
// again after a successful build does nothing.
func (m *Machine[T]) Build() error {
	if m.built != nil {
		return nil
	}
	g := m.Graph()
	var problems []graph.Problem
	var verr *graph.ValidationError
	if err := g.Validate(); err != nil && !errors.As(err, &verr) {
		return err
	}
	if verr != nil {
		problems = verr.Problems
	}
	for _, named := range [][]State{m.initials, m.onDeletes} {
		for _, s := range named {
			if !slices.ContainsFunc(m.states, func(d *stateDef[T]) bool { return d.name == s }) {
				problems = append(problems, graph.Problem{Code: graph.UnknownTarget, States: []graph.State{graph.State(s)},
					Detail: fmt.Sprintf("state %s is named as initial or deletion state but not declared", s)})
			}
		}
	}
	for _, s := range m.states {
		if s.name == Default {
			problems = append(problems, graph.Problem{Code: ReservedState, States: []graph.State{graph.State(s.name)},
				Detail: fmt.Sprintf("state %s is named like the Default event", s.name)})
		}
		if s.handler == nil && !s.final {
			problems = append(problems, graph.Problem{Code: NoHandler, States: []graph.State{graph.State(s.name)},
				Detail: fmt.Sprintf("state %s has no handler", s.name)})
		}
		if m.mode == Pipeline && s.name != "" && (!conditionType.MatchString(string(s.name)) || len(s.name) > 316 ||
			slices.Contains([]State{ConditionReady, ConditionReconciling, ConditionStalled}, s.name)) {
			problems = append(problems, graph.Problem{Code: BadConditionType, States: []graph.State{graph.State(s.name)},
				Detail: fmt.Sprintf("pipeline state %s cannot name its condition: use a valid condition type other than Ready, Reconciling and Stalled", s.name)})
		}
	}
	switch {
	case m.name == "":
		problems = append(problems, graph.Problem{Code: graph.EmptyName, Detail: "the machine has no name"})
	case len(validation.IsDNS1123Label(m.name)) > 0:
		problems = append(problems, graph.Problem{Code: BadMachineName,
			Detail: fmt.Sprintf("machine name %q is not a DNS label: %s", m.name, strings.Join(validation.IsDNS1123Label(m.name), "; "))})
	}
	if m.goal != nil && m.mode == Pipeline {
		problems = append(problems, graph.Problem{Code: GoalInPipeline, Detail: "a pipeline starts from its initial state on every reconcile; declare a goal on a lifecycle machine"})
	}
	if len(problems) > 0 {
		return &graph.ValidationError{Graph: m.name, Problems: problems}
	}

	b := &built[T]{states: map[State]*stateDef[T]{}, deletion: map[State]bool{}, notes: map[[2]State]string{}}
	b.initial = State(g.Initial())
	b.onDelete = State(g.OnDelete())
	for i, s := range m.states {
		b.states[s.name] = s
		s.index = i
		s.spanName = "kfsm.State " + string(s.name)
		s.waiting = fmt.Sprintf("waiting in state %s", s.name)
		s.done = fmt.Sprintf("state %s is done", s.name)
		if b.onDelete != "" {
			b.notes[[2]State{s.name, b.onDelete}] = transitionNote(s.name, b.onDelete)
		}
	}
	b.notes[[2]State{"", b.initial}] = transitionNote("", b.initial)
	for _, e := range g.Edges() {
		b.notes[[2]State{State(e.From), State(e.To)}] = transitionNote(State(e.From), State(e.To))
	}
	for _, s := range g.DeletionPath() {
		b.deletion[State(s)] = true
	}
	if m.goal != nil {
		b.hops = map[[2]State]State{}
		for _, from := range g.States {
			for _, to := range g.States {
				if hop, ok := g.NextHop(from.Name, to.Name); ok && from.Name != to.Name {
					b.hops[[2]State{State(from.Name), State(to.Name)}] = State(hop)
				}
			}
		}
	}
	b.metrics = newMachineMetrics(m.name, g)
	tp := m.tracer
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	b.tracer = tp.Tracer("github.com/kfsm/kfsm/fsm")
	m.built = b
	return nil
}

// SetupWithManager builds the machine and registers it with the manager as
// the controller of T, with the Owns and Watches triggers.
func (m *Machine[T]) SetupWithManager(mgr manager.Manager) error {
	if err := m.Build(); err != nil {
		return err
	}
	r, err := newReconciler(m, mgr.GetClient(), mgr.GetEventRecorder(m.FieldOwner()))
	if err != nil {
		return err
	}
	b := builder.ControllerManagedBy(mgr).Named(m.name).For(newObject[T]()).
		WatchesRawSource(source.Func(r.actions.start))
	for _, o := range m.owns {
		b = b.Owns(o).Watches(o, handler.EnqueueRequestsFromMapFunc(r.parentOf))
	}
	for _, w := range m.watches {
		b = b.Watches(w.obj, handler.EnqueueRequestsFromMapFunc(w.fn))
	}
	if m.workers > 0 {
		b = b.WithOptions(controller.Options{MaxConcurrentReconciles: m.workers})
	}
	return b.Complete(r)
}

// Reconciler builds the machine and returns the reconciler that
// SetupWithManager registers, reading and writing through c and recording
// events with rec. Tests use it to run a machine one reconcile at a time.
func (m *Machine[T]) Reconciler(c client.Client, rec events.EventRecorder) (reconcile.Reconciler, error) {
	if err := m.Build(); err != nil {
		return nil, err
	}
	return newReconciler(m, c, rec)
}

func (m *Machine[T]) stateNames() []State {
	names := make([]State, len(m.states))
	for i, s := range m.states {
		names[i] = s.name
	}
	return names
}

// newObject returns a new, empty T; T is a pointer to a struct.
func newObject[T Object]() T {
	var zero T
	return reflect.New(reflect.TypeOf(zero).Elem()).Interface().(T)
}

// transitionNote is the note of a transition event. Notes are format
// strings to the events API, so a % in a state name is escaped.
func transitionNote(from, to State) string {
	if from == "" {
		from = "(none)"
	}
	return strings.ReplaceAll(fmt.Sprintf("moved from %s to %s", from, to), "%", "%%")
}

func toGraphStates(states []State) []graph.State {
	out := make([]graph.State, len(states))
	for i, s := range states {
		out[i] = graph.State(s)
	}
	return out
}
