package metrics

import (
	"fmt"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kfsm/kfsm/graph"
)

// series gathers controller-runtime's registry, where kfsm's series are
// served, and returns the value of each series of family name whose
// machine label is machine, keyed by its other labels as k=v,k=v.
func series(t *testing.T, name, machine string) map[string]float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var key []string
			ofMachine := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "machine" {
					ofMachine = l.GetValue() == machine
					continue
				}
				key = append(key, l.GetName()+"="+l.GetValue())
			}
			if ofMachine {
				out[strings.Join(key, ",")] = value(m)
			}
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

func door(name string) *graph.Graph {
	return &graph.Graph{Name: name, States: []graph.StateSpec{{Name: "Closed"}, {Name: "Open"}}}
}

// A machine's series exist from its build, at zero, for every state of
// its graph, so that a rate or an alert on them works before the first
// object moves; another machine's are its own.
func TestNewMakesEveryStatesSeriesAtZero(t *testing.T) {
	New("front-door", door("front-door"))
	New("back-door", door("back-door"))
	for _, family := range []string{"kfsm_objects", "kfsm_handler_errors_total"} {
		got := series(t, family, "front-door")
		if len(got) != 2 || got["state=Closed"] != 0 || got["state=Open"] != 0 {
			t.Errorf("%s of front-door: %v, want Closed and Open at 0", family, got)
		}
	}
	for _, family := range []string{"kfsm_stalled_objects", "kfsm_reconciling_objects", "kfsm_status_write_errors_total", "kfsm_newer_objects_left_total"} {
		if got := series(t, family, "front-door"); len(got) != 1 || got[""] != 0 {
			t.Errorf("%s of front-door: %v, want one series at 0", family, got)
		}
	}
}

// Count moves an object into and out of the gauges, a state the graph
// does not declare (one of a newer version's) included; what fails or is
// refused is counted on the machine's own series, and a handler error of
// a state the graph does not have is not counted anywhere.
func TestTheSeriesCountWhatTheMachineTellsThem(t *testing.T) {
	mm := New("garage", door("garage"))
	mm.Count("Closed", false, true, 1)
	mm.Count("Open", true, false, 1)
	mm.Count("Open", true, false, 1)
	mm.Count("Ajar", false, true, 1)
	mm.Count("Open", true, false, -1)
	if got := series(t, "kfsm_objects", "garage"); got["state=Closed"] != 1 || got["state=Open"] != 1 || got["state=Ajar"] != 1 {
		t.Errorf("kfsm_objects of garage: %v, want Closed 1, Open 1, Ajar 1", got)
	}
	if got := series(t, "kfsm_stalled_objects", "garage"); got[""] != 1 {
		t.Errorf("kfsm_stalled_objects of garage: %v, want 1", got)
	}
	if got := series(t, "kfsm_reconciling_objects", "garage"); got[""] != 2 {
		t.Errorf("kfsm_reconciling_objects of garage: %v, want 2", got)
	}

	mm.HandlerError("Open")
	mm.HandlerError("Ajar")
	if got := series(t, "kfsm_handler_errors_total", "garage"); len(got) != 2 || got["state=Open"] != 1 || got["state=Closed"] != 0 {
		t.Errorf("kfsm_handler_errors_total of garage: %v, want Open 1 and Closed 0, no Ajar", got)
	}
	mm.StatusWriteError()
	mm.LeftNewer()
	mm.LeftNewer()
	if got := series(t, "kfsm_status_write_errors_total", "garage"); got[""] != 1 {
		t.Errorf("kfsm_status_write_errors_total of garage: %v, want 1", got)
	}
	if got := series(t, "kfsm_newer_objects_left_total", "garage"); got[""] != 2 {
		t.Errorf("kfsm_newer_objects_left_total of garage: %v, want 2", got)
	}

	if mm.Duration("Ajar") != nil {
		t.Error("Duration of a state the graph does not have is not nil")
	}
	mm.Duration("Closed").Observe(3)
	if got := series(t, "kfsm_state_duration_seconds", "garage"); got["state=Closed"] != 1 || got["state=Open"] != 0 {
		t.Errorf("kfsm_state_duration_seconds of garage, observations: %v, want Closed 1, Open 0", got)
	}

	opened := mm.Transitions("Closed", "Open", "Opened")
	if got := series(t, "kfsm_transitions_total", "garage"); len(got) != 1 || got["from=Closed,reason=Opened,to=Open"] != 0 {
		t.Errorf("kfsm_transitions_total of garage once asked for: %v, want the one series at 0", got)
	}
	opened.Inc()
	if got := series(t, "kfsm_transitions_total", "garage"); got["from=Closed,reason=Opened,to=Open"] != 1 {
		t.Errorf("kfsm_transitions_total of garage: %v, want 1", got)
	}
}

// A family declared twice is a programming error, refused at start.
func TestRegisterRefusesAFamilyDeclaredTwice(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `"kfsm_objects"`) {
			t.Errorf("declaring kfsm_objects again: %v, want a panic naming it", r)
		}
	}()
	Gauges("kfsm_objects", "again", "machine", "state")
}
