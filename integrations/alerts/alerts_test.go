package alerts_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/integrations/alerts"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:    []string{filepath.Join("..", "..", "internal", "testapi", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
}

// The rule groups of the PrometheusRule, as a rule file for promtool.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func rules(t *testing.T) (ruleFile, string) {
	t.Helper()
	var pr struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              ruleFile `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(alerts.PrometheusRule, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" {
		t.Fatalf("kind %q, want PrometheusRule", pr.Kind)
	}
	data, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kfsm.rules.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return pr.Spec, path
}

// promtool runs Debian's promtool, fetched into the user cache on first
// use by tools/prometheus/promtool.sh.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	path, err := exec.CommandContext(t.Context(), "bash", filepath.Join("..", "..", "tools", "prometheus", "promtool.sh")).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("fetching promtool: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("fetching promtool: %v", err)
	}
	out, err := exec.CommandContext(t.Context(), strings.TrimSpace(string(path)), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRulesAreValid(t *testing.T) {
	_, path := rules(t)
	out := promtool(t, "check", "rules", path)
	if !strings.Contains(out, "SUCCESS: 5 rules found") {
		t.Errorf("promtool check rules:\n%s", out)
	}
}

// The alerts fire on the series that kfsm machines really expose when
// they fail, scraped over HTTP once a second for 60 seconds; promtool
// reads each scrape as a minute. Objects that stall, a state that keeps
// failing, an action that keeps failing, objects that wait and no longer
// move and a status that the API server refuses each raise their alert,
// and a healthy machine raises none.
func TestRulesFireOnAFailingMachine(t *testing.T) {
	spec, rulesPath := rules(t)
	e := fsmtest.New(t)
	fsmtest.Run(e, failing(), fsmtest.WithMachine(healthy()))
	for _, mode := range []string{"stalls", "fails", "backup", "stuck", "too-large"} {
		e.Create(&v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: mode}, Spec: v1alpha1.GadgetSpec{Mode: mode}})
	}
	e.Create(&v1alpha1.Door{ObjectMeta: metav1.ObjectMeta{Name: "front"}})

	// KfsmTransitionsStuck fires once no transition came for 20 minutes
	// and then 15 more: the objects' first transitions must come in the
	// first 25 scrapes, which a loaded machine may take 10 s or more to
	// make.
	scrapes := scrape(t, 60, time.Second)
	last := len(scrapes) - 1
	gauge := func(name, machine string) string {
		v, _ := scrapes[last][seriesName(name, map[string]string{"machine": machine})]
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	expect := map[string][]map[string]string{
		"KfsmObjectsStalled":   {{"machine": "alerting", "$value": gauge("kfsm_stalled_objects", "alerting")}},
		"KfsmHandlerFailing":   {{"machine": "alerting", "state": "Work"}},
		"KfsmActionsFailing":   {{"machine": "alerting", "action": "backup"}},
		"KfsmTransitionsStuck": {{"machine": "alerting", "$value": gauge("kfsm_reconciling_objects", "alerting")}},
	}
	var tests strings.Builder
	fmt.Fprintf(&tests, "rule_files: [%q]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n", rulesPath)
	for _, series := range seriesOf(scrapes) {
		fmt.Fprintf(&tests, "      - series: %q\n        values: %q\n", series.name, series.values)
	}
	fmt.Fprintf(&tests, "    alert_rule_test:\n")
	for _, r := range spec.Groups[0].Rules {
		if r.Alert == "KfsmStatusWriteErrors" {
			// The refused writes come at once, then back off until they
			// are minutes apart: the alert is checked early.
			writeAlertTest(&tests, r, "10m", []map[string]string{{"machine": "alerting"}})
			continue
		}
		writeAlertTest(&tests, r, fmt.Sprintf("%dm", last), expect[r.Alert])
	}
	path := filepath.Join(t.TempDir(), "kfsm.tests.yaml")
	if err := os.WriteFile(path, []byte(tests.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out := promtool(t, "test", "rules", path)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s\n%s", out, tests.String())
	}
}

// failing is a machine whose objects, by their mode, stall, keep failing,
// keep failing an action, wait for ever, or carry a status too large to
// write.
func failing() *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("alerting", fsm.Lifecycle).
		Initial("Work").
		State("Work", func(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
			switch r.Object.Spec.Mode {
			case "stalls":
				return fsm.Fail(errors.New("the license server refused"))
			case "fails":
				// A flaky dependency, looked at again every second: every
				// other call fails. The calls that succeed are done, so the
				// state's failures start afresh and never exhaust its
				// retries, and the state keeps failing.
				if flaky.Add(1)%2 == 1 {
					return fsm.Fail(errors.New("the metrics backend timed out"))
				}
				return fsm.Done()
			case "backup":
				if a := r.Action("backup", func(context.Context, *fsm.ActionRun) error { return errors.New("disk full") }, fsm.ActionKind("backup")); a.State == fsm.ActionFailed {
					return fsm.Wait(time.Second, "BackupFailed")
				}
				return fsm.Wait(0, "BackingUp")
			case "too-large":
				r.Object.Status.Note = strings.Repeat("x", 4<<20)
				return fsm.Done()
			}
			return fsm.Wait(0, "WaitingForApproval")
		}, fsm.To("Done"), fsm.Retries(2)).
		State("Done", nil, fsm.Final()).
		Tune(fsm.Tuning{Resync: time.Second})
}

// flaky counts the calls of the flaky dependency.
var flaky atomic.Int64

func healthy() *fsm.Machine[*v1alpha1.Door] {
	return fsm.New[*v1alpha1.Door]("healthy", fsm.Lifecycle).
		Initial("Closed").
		State("Closed", func(context.Context, *fsm.Request[*v1alpha1.Door]) fsm.Result { return fsm.Done() }, fsm.Final())
}

// scrape reads the metrics that the manager serves, over HTTP, n times,
// every interval: each scrape maps a series to its value.
func scrape(t *testing.T, n int, every time.Duration) []map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	var out []map[string]float64
	for i := range n {
		if i > 0 {
			time.Sleep(every)
		}
		values := map[string]float64{}
		for name, f := range get(t, srv.URL) {
			if !strings.HasPrefix(name, "kfsm_") {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if v, ok := value(m); ok && (labels["machine"] == "alerting" || labels["machine"] == "healthy") {
					values[seriesName(name, labels)] = v
				}
			}
		}
		out = append(out, values)
	}
	return out
}

// get scrapes the metrics that url serves, by family.
func get(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	}
	return 0, false // histograms: no rule reads them
}

func seriesName(name string, labels map[string]string) string {
	ls := model.LabelSet{}
	for k, v := range labels {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	return name + ls.String()
}

type series struct{ name, values string }

// seriesOf turns the scrapes into promtool's input series, "_" where a
// series did not exist yet.
func seriesOf(scrapes []map[string]float64) []series {
	var names []string
	for _, s := range scrapes {
		for name := range s {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	var out []series
	for _, name := range names {
		var values []string
		for _, s := range scrapes {
			if v, ok := s[name]; ok {
				values = append(values, strconv.FormatFloat(v, 'g', -1, 64))
			} else {
				values = append(values, "_")
			}
		}
		out = append(out, series{name: name, values: strings.Join(values, " ")})
	}
	return out
}

// writeAlertTest writes promtool's expectation for one alert at one time:
// the alerts with these labels and nothing else, their annotations
// rendered from the rule with the labels and $value given.
func writeAlertTest(b *strings.Builder, r rule, at string, alerts []map[string]string) {
	fmt.Fprintf(b, "      - eval_time: %s\n        alertname: %s\n        exp_alerts:", at, r.Alert)
	if len(alerts) == 0 {
		b.WriteString(" []\n")
		return
	}
	b.WriteString("\n")
	for _, a := range alerts {
		b.WriteString("          - exp_labels:\n")
		for k, v := range r.Labels {
			fmt.Fprintf(b, "              %s: %q\n", k, v)
		}
		for k, v := range a {
			if !strings.HasPrefix(k, "$") {
				fmt.Fprintf(b, "              %s: %q\n", k, v)
			}
		}
		b.WriteString("            exp_annotations:\n")
		for k, text := range r.Annotations {
			for label, v := range a {
				name := "$labels." + label
				if label == "$value" {
					name = "$value"
				}
				text = strings.ReplaceAll(text, "{{ "+name+" }}", v)
			}
			fmt.Fprintf(b, "              %s: %q\n", k, text)
		}
	}
}
