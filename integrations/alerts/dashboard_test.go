package alerts_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/integrations/alerts"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// dashboard is what the test reads of the Grafana dashboard.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// queries returns the dashboard's PromQL, by where it is, with Grafana's
// variables given values that Prometheus accepts.
func queries(t *testing.T) map[string]string {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(alerts.GrafanaDashboard)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("the dashboard has title %q and uid %q, want both", d.Title, d.UID)
	}
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$machine", ".*")
	out := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			// label_values(…) is Grafana's: its argument is the query.
			q := strings.TrimSuffix(strings.TrimPrefix(v.Definition, "label_values("), ")")
			q = q[:strings.LastIndex(q, ",")]
			out["variable "+v.Name] = grafana.Replace(q)
		}
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, target := range p.Targets {
			out[fmt.Sprintf("panel %q, query %d", p.Title, i+1)] = grafana.Replace(target.Expr)
		}
	}
	return out
}

// Every query of the dashboard is PromQL that promtool accepts, and names
// only metrics that running kfsm machines export: a scrape over HTTP of a
// process that runs a machine whose objects move, fail, stall and run
// actions that succeed and fail, and a sharded machine, has each of them.
func TestTheDashboardQueriesMetricsThatMachinesExport(t *testing.T) {
	qs := queries(t)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rs []rule
	for _, where := range slices.Sorted(maps.Keys(qs)) {
		rs = append(rs, rule{Record: fmt.Sprintf("dashboard:query_%d", len(rs)), Expr: qs[where]})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rs}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := promtool(t, "check", "rules", path); !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", len(rs))) {
		t.Errorf("promtool check rules on the dashboard's queries:\n%s", out)
	}

	e := fsmtest.New(t)
	fsmtest.Run(e, showcase())
	for _, mode := range []string{"moves", "stalls", "backup", "broken-backup", "too-large"} {
		e.Create(&v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: mode}, Spec: v1alpha1.GadgetSpec{Mode: mode}})
	}
	runSharded(t, e)

	srv := httptest.NewServer(promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	metric := regexp.MustCompile(`\bkfsm_[a-z0-9_]+\b`)
	var missing []string
	deadline := time.Now().Add(time.Minute)
	for {
		exported := families(t, srv.URL)
		missing = missing[:0]
		for _, where := range slices.Sorted(maps.Keys(qs)) {
			names := metric.FindAllString(qs[where], -1)
			if len(names) == 0 {
				t.Fatalf("%s names no kfsm metric: %s", where, qs[where])
			}
			for _, name := range names {
				if !exported(name) {
					missing = append(missing, fmt.Sprintf("%s: %s", where, name))
				}
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(missing) > 0 {
		t.Errorf("the dashboard queries metrics that no running machine exported within a minute:\n\t%s", strings.Join(missing, "\n\t"))
	}
}

// families scrapes the metrics that url serves and reports which series
// names it exports: a histogram's _bucket, _sum and _count included.
func families(t *testing.T, url string) func(string) bool {
	t.Helper()
	parsed := get(t, url)
	return func(name string) bool {
		if f, ok := parsed[name]; ok && len(f.GetMetric()) > 0 {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f, ok := parsed[strings.TrimSuffix(name, suffix)]; ok && f.GetType() == dto.MetricType_HISTOGRAM && len(f.GetMetric()) > 0 {
				return true
			}
		}
		return false
	}
}

// showcase is a machine whose objects, by their mode, move on, stall,
// run an action that succeeds or one that fails, or carry a status too
// large to write.
func showcase() *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("dashboard", fsm.Lifecycle).
		Initial("Work").
		State("Work", func(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
			switch r.Object.Spec.Mode {
			case "moves":
				return fsm.Next("Done")
			case "stalls":
				return fsm.Fail(errors.New("the license server refused"))
			case "backup", "broken-backup":
				broken := r.Object.Spec.Mode == "broken-backup"
				a := r.Action("backup-"+r.Object.Name, func(context.Context, *fsm.ActionRun) error {
					if broken {
						return errors.New("disk full")
					}
					return nil
				}, fsm.ActionKind("backup"))
				switch a.State {
				case fsm.ActionSucceeded:
					return fsm.Next("Done")
				case fsm.ActionFailed:
					return fsm.Wait(time.Minute, "BackupFailed")
				}
				return fsm.Wait(0, "BackingUp")
			case "too-large":
				r.Object.Status.Note = strings.Repeat("x", 4<<20)
				return fsm.Done()
			}
			return fsm.Wait(0, "Waiting")
		}, fsm.To("Done"), fsm.Retries(1)).
		State("Done", nil, fsm.Final())
}

// runSharded runs a sharded machine of Doors in a manager of its own, as
// one replica of a group, until the test ends.
func runSharded(t *testing.T, e *fsmtest.Env) {
	t.Helper()
	cfg := e.Config()
	opts := manager.Options{
		Scheme:     e.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{e.Namespace: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	shards, err := sharding.New(cfg, &opts, sharding.Options{Name: "dashboard", Namespace: e.Namespace, Identity: "replica-0",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	m := fsm.New[*v1alpha1.Door]("dashboard-sharded", fsm.Lifecycle).
		Initial("Closed").
		State("Closed", func(context.Context, *fsm.Request[*v1alpha1.Door]) fsm.Result { return fsm.Done() }, fsm.Final()).
		Sharded(shards)
	if err := m.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the sharded replica stopped: %v", err)
		}
	})
	e.Create(&v1alpha1.Door{ObjectMeta: metav1.ObjectMeta{Name: "front"}})
}
