package fsm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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
	return &Machine[T]{name: name, mode: mode, clock: clock.RealClock{}, historyLimit: 10}
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

// Owns reconciles an object when a child of type obj that it controls
// changes: the equivalent of controller-runtime's builder Owns.
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
	if m.name == "" {
		problems = append(problems, graph.Problem{Code: graph.EmptyName, Detail: "the machine has no name"})
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
	r := newReconciler(m, mgr.GetClient(), mgr.GetEventRecorder(m.FieldOwner()))
	b := builder.ControllerManagedBy(mgr).Named(m.name).For(newObject[T]())
	for _, o := range m.owns {
		b = b.Owns(o)
	}
	for _, w := range m.watches {
		b = b.Watches(w.obj, handler.EnqueueRequestsFromMapFunc(w.fn))
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
	return newReconciler(m, c, rec), nil
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
