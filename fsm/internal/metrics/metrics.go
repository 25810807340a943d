// Package metrics holds the Prometheus series of kfsm's machines:
// transitions, time in a state, objects by state, stalled and reconciling
// objects, handler failures and refused status writes. Package fsm keeps
// one Machine per machine and tells it what happened. Every series of
// kfsm, those of actions and shards too, is declared with Gauges,
// Counters or Register.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kfsm/kfsm/graph"
)

// The collectors are registered once with controller-runtime's registry and
// shared by every machine; the machine label tells them apart.
var (
	transitionsTotal = Counters("kfsm_transitions_total", "Transitions between states whose status was written, by why the object moved.", "machine", "from", "to", "reason")
	stateDuration    = Register(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kfsm_state_duration_seconds",
		Help: "Time objects spent in a state, observed when they leave it.",
		// Operator work spans sub-second steps to waits of hours.
		Buckets: []float64{0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600},
	}, []string{"machine", "state"}))
	objectsGauge           = Gauges("kfsm_objects", "Objects in each state, as last reconciled by this process.", "machine", "state")
	handlerErrorsTotal     = Counters("kfsm_handler_errors_total", "Handler failures, panics included.", "machine", "state")
	stalledGauge           = Gauges("kfsm_stalled_objects", "Objects that are Stalled.", "machine")
	reconcilingGauge       = Gauges("kfsm_reconciling_objects", "Objects that are Reconciling: walking, waiting or retrying.", "machine")
	statusWriteErrorsTotal = Counters("kfsm_status_write_errors_total", "Status writes that the API server refused for another reason than a conflict.", "machine")
	newerTotal             = Counters("kfsm_newer_objects_left_total", "Objects that a newer version of the machine's graph wrote, which this process left alone.", "machine")
)

// Gauges declares a family of kfsm's gauges in controller-runtime's
// registry.
func Gauges(name, help string, labels ...string) *prometheus.GaugeVec {
	return Register(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// Counters declares a family of kfsm's counters there.
func Counters(name, help string, labels ...string) *prometheus.CounterVec {
	return Register(prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// Register adds c to controller-runtime's registry.
func Register[C prometheus.Collector](c C) C {
	metrics.Registry.MustRegister(c)
	return c
}

// Machine holds a machine's series, resolved once at build so that a
// step does no label lookups.
type Machine struct {
	name              string
	duration          map[string]prometheus.Observer
	errors            map[string]prometheus.Counter
	objects           map[string]prometheus.Gauge
	stalled           prometheus.Gauge
	reconciling       prometheus.Gauge
	statusWriteErrors prometheus.Counter
	leftNewer         prometheus.Counter
}

// New makes the series of machine name, of graph g.
func New(name string, g *graph.Graph) *Machine {
	mm := &Machine{
		name:              name,
		duration:          map[string]prometheus.Observer{},
		errors:            map[string]prometheus.Counter{},
		objects:           map[string]prometheus.Gauge{},
		stalled:           stalledGauge.WithLabelValues(name),
		reconciling:       reconcilingGauge.WithLabelValues(name),
		statusWriteErrors: statusWriteErrorsTotal.WithLabelValues(name),
		leftNewer:         newerTotal.WithLabelValues(name),
	}
	for _, s := range g.States {
		st := string(s.Name)
		mm.duration[st] = stateDuration.WithLabelValues(name, st)
		mm.errors[st] = handlerErrorsTotal.WithLabelValues(name, st)
		mm.objects[st] = objectsGauge.WithLabelValues(name, st)
	}
	return mm
}

// Transitions is the series that counts the transitions from one state
// to another for a reason; asking for it makes it, at zero. Package fsm
// asks at build for the moves a graph declares, so that rates work from
// the first one, and keeps them.
func (mm *Machine) Transitions(from, to, reason string) prometheus.Counter {
	return transitionsTotal.WithLabelValues(mm.name, from, to, reason)
}

// Duration is the histogram of the time objects spent in state, observed
// as they leave it, or nil for a state the graph does not have.
func (mm *Machine) Duration(state string) prometheus.Observer { return mm.duration[state] }

// HandlerError counts a failure of state's handler.
func (mm *Machine) HandlerError(state string) {
	if c, ok := mm.errors[state]; ok {
		c.Inc()
	}
}

// Count adds an object in state, stalled or reconciling, to the gauges,
// or takes it away when delta is -1.
func (mm *Machine) Count(state string, stalled, reconciling bool, delta float64) {
	g, ok := mm.objects[state]
	if !ok {
		g = objectsGauge.WithLabelValues(mm.name, state)
	}
	g.Add(delta)
	if stalled {
		mm.stalled.Add(delta)
	}
	if reconciling {
		mm.reconciling.Add(delta)
	}
}

// StatusWriteError counts a status write that the API server refused for
// another reason than a conflict.
func (mm *Machine) StatusWriteError() { mm.statusWriteErrors.Inc() }

// LeftNewer counts an object that a newer version of the graph wrote, left
// alone.
func (mm *Machine) LeftNewer() { mm.leftNewer.Inc() }
