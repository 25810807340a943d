package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// report is what a controller process says about itself when asked.
type report struct {
	Reconciles int            `json:"reconciles"`
	Requests   map[string]int `json:"requests"` // "verb resource" → count
	CPU        float64        `json:"cpu"`      // user + system seconds
	MaxRSS     int64          `json:"maxrss"`   // bytes
}

// controllerMain is the controller process: a manager that runs one
// implementation of the workload over one namespace, and answers
// "report" lines on standard input with a JSON report on standard output.
func controllerMain(impl, namespace, kubeconfig string, workers int, cpuprofile string) error {
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		defer writeHeapProfile(strings.TrimSuffix(cpuprofile, ".prof") + ".heap")
	}
	ctrl.SetLogger(logr.Discard())
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	unthrottled(cfg)
	requests := &requestCounter{counts: map[string]int{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, counter: requests} })

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 logr.Discard(),
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	switch impl {
	case "kfsm":
		err = setupKfsm(mgr, workers)
	case "hand":
		err = setupHand(mgr, workers)
	default:
		err = fmt.Errorf("unknown implementation %q", impl)
	}
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	out := json.NewEncoder(os.Stdout)
	for {
		select {
		case err := <-done:
			return err
		case line, ok := <-lines:
			if !ok || line == "stop" {
				cancel()
				return <-done
			}
			if line == "report" {
				if err := out.Encode(snapshot(requests)); err != nil {
					return err
				}
			}
		}
	}
}

// writeHeapProfile writes the live heap at the end of the run, beside the
// CPU profile.
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench controller:", err)
		return
	}
	defer func() { _ = f.Close() }()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "bench controller:", err)
	}
}

func snapshot(requests *requestCounter) report {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return report{
		Reconciles: reconciles(),
		Requests:   requests.snapshot(),
		CPU:        seconds(ru.Utime) + seconds(ru.Stime),
		MaxRSS:     ru.Maxrss * 1024,
	}
}

func seconds(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// reconciles sums controller-runtime's reconcile counter, which both
// implementations have, so that counting costs neither anything.
func reconciles() int {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return -1
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			n += counterValue(m)
		}
	}
	return int(n)
}

func counterValue(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return 0
}

// unthrottled lifts client-go's client-side rate limit.
func unthrottled(cfg *rest.Config) {
	cfg.QPS = -1
	cfg.Burst = 0
}

// requestCounter counts API requests by verb and resource.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *requestCounter) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[key]++
}

func (c *requestCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

type countingTransport struct {
	next    http.RoundTripper
	counter *requestCounter
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb, resource := classify(req)
	t.counter.add(verb + " " + resource)
	return t.next.RoundTrip(req)
}

// classify names a request as the API server's request metrics do:
// verb (get, list, watch, create, update, patch, apply, delete) and
// resource, with "/status" for the status subresource.
func classify(req *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(req.Method), req.URL.Path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	named := len(parts) >= 2
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodDelete:
		verb = "delete"
	case http.MethodPatch:
		verb = "patch"
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			verb = "apply"
		}
	default:
		verb = strings.ToLower(req.Method)
	}
	return verb, resource
}
