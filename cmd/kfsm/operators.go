package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/examples/moose"
	moosev1 "github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/examples/webapp"
	"github.com/kfsm/kfsm/examples/webapp/dns"
	webappv1 "github.com/kfsm/kfsm/examples/webapp/v1alpha1"
)

// herdSize is how many moose the demo creates.
const herdSize = 25

// writeCRDs writes the examples' CRDs into dir, for the cluster to install.
func writeCRDs(dir string) error {
	for _, crds := range []fs.FS{moose.CRDs, webapp.CRDs} {
		err := fs.WalkDir(crds, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := fs.ReadFile(crds, path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o600)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// runOperators runs the moose and web app operators in one manager, with
// the web app's DNS registry, and creates the herd and two web apps. It
// prints every transition to out, and returns when ctx ends.
func runOperators(ctx context.Context, cfg *rest.Config, out io.Writer) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, moosev1.AddToScheme, webappv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	// The herd is created at once and then reconciled in bursts; the
	// default client rate limit would make it trickle in.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	log := logr.New(&transitionPrinter{out: out})
	ctrl.SetLogger(log)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Logger: log, Metrics: metricsserver.Options{BindAddress: "0"},
		// A process may run the demo more than once, as its tests do.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	registry, err := dns.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer func() { _ = registry.Close() }()
	if err := moose.NewHerd(uint64(time.Now().UnixNano())).Machine().SetupWithManager(mgr); err != nil {
		return err
	}
	op := &webapp.Operator{DNS: &dns.Client{URL: registry.URL()}}
	if err := op.Machine().SetupWithManager(mgr); err != nil {
		return err
	}

	fmt.Fprintf(out, "dns registry: %s/records\n", registry.URL())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if err := createDemoObjects(ctx, mgr.GetClient()); err != nil && ctx.Err() == nil {
		return errors.Join(err, <-done)
	}
	return <-done
}

// createDemoObjects creates a herd with random weights, so that the moose
// cycle at different rates, and two web apps.
func createDemoObjects(ctx context.Context, c client.Client) error {
	ns := metav1.NamespaceDefault
	for i := range herdSize {
		m := &moosev1.Moose{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("moose-%02d", i+1), Namespace: ns},
			Spec:       moosev1.MooseSpec{Weight: 200 + rand.Int32N(800)},
		}
		if err := c.Create(ctx, m); err != nil {
			return fmt.Errorf("creating %s: %w", m.Name, err)
		}
	}
	apps := []*webappv1.WebApp{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
			Spec: webappv1.WebAppSpec{Image: "registry.example/shop:1.0", Replicas: 3, Expose: true,
				Config: map[string]string{"CURRENCY": "EUR"}, DNSName: "shop.kfsm.example"},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "blog", Namespace: ns},
			Spec:       webappv1.WebAppSpec{Image: "registry.example/blog:2.4", Replicas: 1, DNSName: "blog.kfsm.example"},
		},
	}
	for _, a := range apps {
		if err := c.Create(ctx, a); err != nil {
			return fmt.Errorf("creating web app %s: %w", a.Name, err)
		}
	}
	return nil
}

// transitionPrinter is the demo's log: one line per transition, from the
// log line that kfsm writes for each, and errors.
type transitionPrinter struct {
	mu  *sync.Mutex
	out io.Writer
}

func (p *transitionPrinter) Init(logr.RuntimeInfo) {
	if p.mu == nil {
		p.mu = &sync.Mutex{}
	}
}

func (p *transitionPrinter) Enabled(level int) bool { return level == 0 }

func (p *transitionPrinter) Info(_ int, msg string, kv ...any) {
	if msg != "transition" {
		return
	}
	f := fields(kv)
	name := f["object"]
	if _, n, ok := strings.Cut(name, "/"); ok {
		name = n
	}
	from := f["from"]
	if from == "" {
		from = "(new)"
	}
	p.print(fmt.Sprintf("%s  %-18s %-9s → %-9s %s", time.Now().Format("15:04:05"), f["machine"]+"/"+name, from, f["to"], f["reason"]))
}

func (p *transitionPrinter) Error(err error, msg string, _ ...any) {
	p.print(fmt.Sprintf("%s  error: %s: %v", time.Now().Format("15:04:05"), msg, err))
}

func (p *transitionPrinter) print(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.out, line)
}

func (p *transitionPrinter) WithValues(...any) logr.LogSink { return p }
func (p *transitionPrinter) WithName(string) logr.LogSink   { return p }

func fields(kv []any) map[string]string {
	f := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok {
			f[k] = fmt.Sprint(kv[i+1])
		}
	}
	return f
}
