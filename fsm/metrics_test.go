package fsm_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestTransitionMetrics(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("metrics", fsm.Lifecycle).
		Initial("A").
		State("A", next("B"), fsm.To("B")).
		State("B", done, fsm.Final())
	r := e.reconciler(m)
	for _, name := range []string{"one", "two"} {
		e.gadget(name, v1alpha1.GadgetSpec{})
		e.reconcile(r, name)
	}
	if got := metricValue(t, "kfsm_transitions_total", map[string]string{"machine": "metrics", "from": "A", "to": "B"}); got != 2 {
		t.Errorf("kfsm_transitions_total{A->B} = %v, want 2", got)
	}
	if got := metricValue(t, "kfsm_objects", map[string]string{"machine": "metrics", "state": "B"}); got != 2 {
		t.Errorf("kfsm_objects{B} = %v, want 2", got)
	}
	if got := metricValue(t, "kfsm_state_duration_seconds", map[string]string{"machine": "metrics", "state": "A"}); got != 2 {
		t.Errorf("kfsm_state_duration_seconds{A} has %v observations, want 2", got)
	}
	if err := e.direct.Delete(t.Context(), e.get("one")); err != nil {
		t.Fatal(err)
	}
	e.reconcile(r, "one")
	if got := metricValue(t, "kfsm_objects", map[string]string{"machine": "metrics", "state": "B"}); got != 1 {
		t.Errorf("kfsm_objects{B} = %v after a deletion, want 1", got)
	}
}

// A lifecycle machine's transitions counter has a series for each move its
// graph allows, at zero, and none for moves that cannot happen.
func TestTransitionSeriesFollowTheGraph(t *testing.T) {
	if err := tutorial().Build(); err != nil {
		t.Fatal(err)
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		if f.GetName() != "kfsm_transitions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["machine"] == "door" {
				got = append(got, fmt.Sprintf("%s→%s %s", l["from"], l["to"], l["reason"]))
			}
		}
	}
	slices.Sort(got)
	want := []string{"Closed→Open Next", "Closed→Removed Deleted", "Open→Closed Next", "Open→Closed Timeout", "Open→Removed Deleted", "→Closed Created"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series of kfsm_transitions_total{machine=door} (-want +got):\n%s", diff)
	}
}

// metricExists reports whether the registry has a series of name with
// the labels.
func metricExists(t *testing.T, name string, labels map[string]string) bool {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && slices.ContainsFunc(f.GetMetric(), func(m *dto.Metric) bool { return matches(m, labels) }) {
			return true
		}
	}
	return false
}

// metricValue reads a counter or gauge, or a histogram's sample count, from
// controller-runtime's registry.
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(labels)
}
