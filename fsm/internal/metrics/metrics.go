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
	transitions       map[move]prometheus.Counter
	duration          map[string]prometheus.Observer
	errors            map[string]prometheus.Counter
	objects           map[string]prometheus.Gauge
	stalled           prometheus.Gauge
	reconciling       prometheus.Gauge
	statusWriteErrors prometheus.Counter
	leftNewer         prometheus.Counter
}

// move is a transition as the metrics count it.
type move struct{ from, to, reason string }

// Reasons are the reasons of the transitions that a lifecycle machine's
// graph declares, which package fsm names.
type Reasons struct {
	Created, Next, Timeout, RetriesExhausted, Deleted string
}

// New makes the series of machine name, of graph g.
func New(name string, g *graph.Graph, why Reasons) *Machine {
	mm := &Machine{
		name:              name,
		transitions:       map[move]prometheus.Counter{},
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
	// A lifecycle machine's moves are known from its graph, and start at
	// zero, so that rates work from the first one. A pipeline rests where
	// its pass ends, for reasons its handlers give: those series appear
	// when they happen.
	if g.Mode != graph.Lifecycle {
		return mm
	}
	add := func(from, to graph.State, reason string) {
		m := move{string(from), string(to), reason}
		mm.transitions[m] = transitionsTotal.WithLabelValues(name, m.from, m.to, reason)
	}
	deletion := map[graph.State]bool{}
	for _, s := range g.DeletionPath() {
		deletion[s] = true
	}
	for _, s := range g.States {
		if s.Initial {
			add("", s.Name, why.Created)
		}
		for _, to := range s.Exits {
			add(s.Name, to, why.Next)
		}
		if s.Timeout != nil {
			add(s.Name, s.Timeout.To, why.Timeout)
		}
		if s.Retries != nil && s.Retries.To != "" {
			add(s.Name, s.Retries.To, why.RetriesExhausted)
		}
		if onDelete := g.OnDelete(); onDelete != "" && !deletion[s.Name] {
			add(s.Name, onDelete, why.Deleted)
		}
	}
	return mm
}

// Transition counts a transition whose status was written.
func (mm *Machine) Transition(from, to, reason string) {
	c, ok := mm.transitions[move{from, to, reason}]
	if !ok {
		c = transitionsTotal.WithLabelValues(mm.name, from, to, reason)
	}
	c.Inc()
}

// Left observes the time an object spent in state as it left it.
func (mm *Machine) Left(state string, seconds float64) {
	if o, ok := mm.duration[state]; ok {
		o.Observe(seconds)
	}
}

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
