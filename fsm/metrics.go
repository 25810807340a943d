package fsm

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kfsm/kfsm/graph"
)

// The collectors are registered once with controller-runtime's registry and
// shared by every machine; the machine label tells them apart.
var (
	transitionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kfsm_transitions_total",
		Help: "Transitions between states.",
	}, []string{"machine", "from", "to"})
	stateDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kfsm_state_duration_seconds",
		Help: "Time objects spent in a state, observed when they leave it.",
		// Operator work spans sub-second steps to waits of hours.
		Buckets: []float64{0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600},
	}, []string{"machine", "state"})
	objectsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_objects",
		Help: "Objects in each state, as last reconciled by this process.",
	}, []string{"machine", "state"})
	handlerErrorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kfsm_handler_errors_total",
		Help: "Handler failures, panics included.",
	}, []string{"machine", "state"})
	stalledGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_stalled_objects",
		Help: "Objects that are Stalled.",
	}, []string{"machine"})
	actionsRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_actions_running",
		Help: "Asynchronous actions running now.",
	}, []string{"machine", "action"})
	actionsCompleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kfsm_actions_completed_total",
		Help: "Asynchronous actions that succeeded.",
	}, []string{"machine", "action"})
	actionsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kfsm_actions_failed_total",
		Help: "Asynchronous actions that failed or panicked.",
	}, []string{"machine", "action"})
)

func init() {
	metrics.Registry.MustRegister(transitionsTotal, stateDuration, objectsGauge, handlerErrorsTotal, stalledGauge,
		actionsRunning, actionsCompleted, actionsFailed)
}

// machineMetrics holds a machine's series, resolved once at build so that a
// step does no label lookups.
type machineMetrics struct {
	name        string
	transitions map[[2]State]prometheus.Counter
	duration    map[State]prometheus.Observer
	errors      map[State]prometheus.Counter
	objects     map[State]prometheus.Gauge
	stalled     prometheus.Gauge
}

func newMachineMetrics(name string, g *graph.Graph) *machineMetrics {
	mm := &machineMetrics{
		name:        name,
		transitions: map[[2]State]prometheus.Counter{},
		duration:    map[State]prometheus.Observer{},
		errors:      map[State]prometheus.Counter{},
		objects:     map[State]prometheus.Gauge{},
		stalled:     stalledGauge.WithLabelValues(name),
	}
	pair := func(from, to graph.State) {
		key := [2]State{State(from), State(to)}
		if _, ok := mm.transitions[key]; !ok {
			mm.transitions[key] = transitionsTotal.WithLabelValues(name, string(from), string(to))
		}
	}
	for _, s := range g.States {
		st := State(s.Name)
		mm.duration[st] = stateDuration.WithLabelValues(name, string(st))
		mm.errors[st] = handlerErrorsTotal.WithLabelValues(name, string(st))
		mm.objects[st] = objectsGauge.WithLabelValues(name, string(st))
		if s.Initial {
			pair("", s.Name)
		}
		if onDelete := g.OnDelete(); onDelete != "" {
			pair(s.Name, onDelete)
		}
	}
	for _, e := range g.Edges() {
		pair(e.From, e.To)
	}
	return mm
}

func (mm *machineMetrics) transition(from, to State) {
	c, ok := mm.transitions[[2]State{from, to}]
	if !ok {
		c = transitionsTotal.WithLabelValues(mm.name, string(from), string(to))
	}
	c.Inc()
}

func (mm *machineMetrics) left(state State, seconds float64) {
	if o, ok := mm.duration[state]; ok {
		o.Observe(seconds)
	}
}

func (mm *machineMetrics) handlerError(state State) {
	if c, ok := mm.errors[state]; ok {
		c.Inc()
	}
}

func (mm *machineMetrics) objectsIn(state State, delta float64) {
	g, ok := mm.objects[state]
	if !ok {
		g = objectsGauge.WithLabelValues(mm.name, string(state))
	}
	g.Add(delta)
}
