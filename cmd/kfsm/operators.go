package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/kfsm/kfsm/cesink"
	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/examples/autoupdate"
	"github.com/kfsm/kfsm/examples/autoupdate/host"
	versionpb "github.com/kfsm/kfsm/examples/autoupdate/proto"
	autoupdatev1 "github.com/kfsm/kfsm/examples/autoupdate/v1alpha1"
	"github.com/kfsm/kfsm/examples/autoupdate/versionserver"
	"github.com/kfsm/kfsm/examples/database"
	"github.com/kfsm/kfsm/examples/database/agent"
	databasev1 "github.com/kfsm/kfsm/examples/database/v1alpha1"
	"github.com/kfsm/kfsm/examples/moose"
	moosev1 "github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/examples/webapp"
	"github.com/kfsm/kfsm/examples/webapp/dns"
	webappv1 "github.com/kfsm/kfsm/examples/webapp/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
)

// herdSize is how many moose the demo creates.
const herdSize = 25

// writeCRDs writes the examples' CRDs into dir, for the cluster to install.
func writeCRDs(dir string) error {
	for _, crds := range []fs.FS{moose.CRDs, webapp.CRDs, autoupdate.CRDs, database.CRDs} {
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

// runOperators runs the four example operators in one manager, as the
// ServiceAccount kfsm-demo/operator with the examples' generated roles and
// with their admission webhooks, and the servers they talk to on
// loopback. It creates their objects and plays the demo's story as the
// cluster's admin, prints every transition with printer, and returns when
// ctx ends.
func runOperators(ctx context.Context, c *cluster.Cluster, printer *transitionPrinter) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, moosev1.AddToScheme, webappv1.AddToScheme, autoupdatev1.AddToScheme, databasev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := c.ServiceAccount(ctx, "kfsm-demo", "operator", moose.Role, webapp.Role, autoupdate.Role, database.Role)
	if err != nil {
		return err
	}
	admin, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	serving, err := cluster.NewWebhookServing()
	if err != nil {
		return err
	}
	defer func() { _ = serving.Close() }()
	// The herd is created at once and then reconciled in bursts; the
	// default client rate limit would make it trickle in.
	cfg.QPS, cfg.Burst = 200, 400
	log := logr.New(printer)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Logger: log, Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(serving.ServerOptions()),
		// A process may run the demo more than once, as its tests do.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	w, err := startServers(ctx, printer)
	if err != nil {
		return err
	}
	defer w.close()
	var webhooks []client.Object
	for _, setup := range []func(ctrl.Manager) ([]client.Object, error){
		serve(moose.NewHerd(uint64(time.Now().UnixNano())).Machine(), serving),
		serve((&webapp.Operator{DNS: &dns.Client{URL: w.registry.URL()}}).Machine(), serving),
		serve(w.autoupdate.Machine(), serving),
		serve(w.database.Machine(), serving),
	} {
		configs, err := setup(mgr)
		if err != nil {
			return err
		}
		webhooks = append(webhooks, configs...)
	}

	printer.print(fmt.Sprintf("dns registry: %s/records", w.registry.URL()))
	printer.print(fmt.Sprintf("version server: %s (gRPC), client instances: %s/instances, database agent: %s/databases/default.orders",
		w.versions.Addr(), w.host.URL(), w.agent.URL()))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if err := serving.Install(ctx, admin, mgr.GetWebhookServer(), webhooks...); err != nil && ctx.Err() == nil {
		return errors.Join(err, <-done)
	}
	if err := createDemoObjects(ctx, admin); err != nil && ctx.Err() == nil {
		return errors.Join(err, <-done)
	}
	go playStory(ctx, admin, w.versions, printer)
	return <-done
}

// serve sets m up with the manager, its webhooks too, and returns the
// configurations that make the API server call them at serving.
func serve[T fsm.Object](m *fsm.Machine[T], serving *cluster.WebhookServing) func(ctrl.Manager) ([]client.Object, error) {
	return func(mgr ctrl.Manager) ([]client.Object, error) {
		if err := m.SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := m.SetupWebhookWithManager(mgr); err != nil {
			return nil, err
		}
		gvk, err := apiutil.GVKForObject(reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T), mgr.GetScheme())
		if err != nil {
			return nil, err
		}
		mapping, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, err
		}
		validating, mutating := m.WebhookConfigurations(mapping.Resource, serving.ClientConfig())
		if mutating != nil {
			return []client.Object{validating, mutating}, nil
		}
		return []client.Object{validating}, nil
	}
}

// servers are what the demo's operators talk to, all on loopback.
type servers struct {
	registry   *dns.Registry
	versions   *versionserver.Server
	host       *host.Host
	agent      *agent.Agent
	autoupdate *autoupdate.Operator
	database   *database.Operator
	closers    []func()
}

func (s *servers) close() {
	for _, c := range slices.Backward(s.closers) {
		c()
	}
}

// startServers starts the DNS registry, the version server, the instance
// host, the database agent and a CloudEvents receiver that prints what it
// gets, and the operators that use them.
func startServers(ctx context.Context, p *transitionPrinter) (w *servers, err error) {
	w = &servers{}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.registry, err = dns.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() { _ = w.registry.Close() })
	if w.versions, err = versionserver.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	w.closers = append(w.closers, w.versions.Stop)
	w.versions.Publish("stable", demoRelease("1.0.0", false))
	if w.host, err = host.Start("127.0.0.1:0"); err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() { _ = w.host.Close() })
	timings := agent.Timings{Start: time.Second, Stop: 500 * time.Millisecond, Backup: 3 * time.Second, Configure: time.Second}
	if w.agent, err = agent.Start("127.0.0.1:0", timings); err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() { _ = w.agent.Close() })

	conn, err := grpc.NewClient(w.versions.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() { _ = conn.Close() })
	w.autoupdate = &autoupdate.Operator{Versions: versionpb.NewVersionServiceClient(conn), Host: &host.Client{URL: w.host.URL()}, Poll: 3 * time.Second}

	sink, err := receiveCloudEvents(ctx, p)
	if err != nil {
		return nil, err
	}
	events, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(sink))
	if err != nil {
		return nil, err
	}
	w.database = &database.Operator{Agent: &agent.Client{URL: w.agent.URL()}, Events: events}
	return w, nil
}

// receiveCloudEvents serves a CloudEvents receiver on loopback that prints
// each transition it gets, and returns its URL.
func receiveCloudEvents(ctx context.Context, p *transitionPrinter) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	proto, err := cloudevents.NewHTTP(cehttp.WithListener(l))
	if err != nil {
		return "", err
	}
	c, err := cloudevents.NewClient(proto)
	if err != nil {
		return "", err
	}
	go func() {
		_ = c.StartReceiver(ctx, func(e cloudevents.Event) {
			var t cesink.Data
			if err := e.DataAs(&t); err == nil {
				from := cmp.Or(string(t.From), "(new)")
				p.print(fmt.Sprintf("%s  cloudevent %s: %s %s → %s", e.Time().Local().Format("15:04:05"), e.Type(), e.Subject(), from, t.To))
			}
		})
	}()
	return "http://" + l.Addr().String(), nil
}

func demoRelease(version string, broken bool) *versionpb.Package {
	return &versionpb.Package{
		Name: "agent", Version: version, ConfigYaml: "log: info\n",
		Runtime: &versionpb.Runtime{StartupMillis: 1500, Broken: broken},
	}
}

// playStory is the demo's script: a new release while the client runs, a
// broken release that is refused, and a database asked to service and then
// to stop.
func playStory(ctx context.Context, c client.Client, versions *versionserver.Server, p *transitionPrinter) {
	orders := client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "orders"}
	changeDatabase := func(change func(*databasev1.DatabaseSpec)) error {
		var db databasev1.Database
		if err := c.Get(ctx, orders, &db); err != nil {
			return err
		}
		change(&db.Spec)
		return c.Update(ctx, &db)
	}
	steps := []struct {
		after time.Duration
		say   string
		do    func() error
	}{
		{10 * time.Second, "releasing agent 1.1.0", func() error { versions.Publish("stable", demoRelease("1.1.0", false)); return nil }},
		{20 * time.Second, "releasing agent 1.2.0, a broken build", func() error { versions.Publish("stable", demoRelease("1.2.0", true)); return nil }},
		{35 * time.Second, "asking database orders to service, with a backup", func() error {
			return changeDatabase(func(s *databasev1.DatabaseSpec) { s.DesiredState, s.Backup = "Servicing", "nightly-1" })
		}},
		{50 * time.Second, "asking database orders to stop", func() error {
			return changeDatabase(func(s *databasev1.DatabaseSpec) { s.DesiredState = "Stopped" })
		}},
	}
	began := time.Now()
	for _, step := range steps {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(began.Add(step.after))):
		}
		p.print(fmt.Sprintf("%s  story: %s", time.Now().Format("15:04:05"), step.say))
		if err := step.do(); err != nil && ctx.Err() == nil {
			p.print(fmt.Sprintf("%s  story: %v", time.Now().Format("15:04:05"), err))
		}
	}
}

// createDemoObjects creates a herd with random weights, so that the moose
// cycle at different rates, two web apps, a managed client and a database.
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
			Spec: webappv1.WebAppSpec{Image: "registry.example/shop:1.0", Replicas: ptr.To[int32](3), Expose: ptr.To(true),
				Config: map[string]string{"CURRENCY": "EUR"}, DNSName: "shop.kfsm.example"},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "blog", Namespace: ns},
			Spec:       webappv1.WebAppSpec{Image: "registry.example/blog:2.4", Replicas: ptr.To[int32](1), DNSName: "blog.kfsm.example"},
		},
	}
	for _, a := range apps {
		if err := c.Create(ctx, a); err != nil {
			return fmt.Errorf("creating web app %s: %w", a.Name, err)
		}
	}
	mc := &autoupdatev1.ManagedClient{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Spec: autoupdatev1.ManagedClientSpec{Channel: "stable"}}
	if err := c.Create(ctx, mc); err != nil {
		return fmt.Errorf("creating managed client %s: %w", mc.Name, err)
	}
	db := &databasev1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns}, Spec: databasev1.DatabaseSpec{DesiredState: "Running"}}
	if err := c.Create(ctx, db); err != nil {
		return fmt.Errorf("creating database %s: %w", db.Name, err)
	}
	return nil
}

// transitionPrinter is the demo's log: one line per transition, from the
// log line that kfsm writes for each, and errors.
type transitionPrinter struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *transitionPrinter) Init(logr.RuntimeInfo) {}

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

// print writes line as one line: it names objects, states and errors of
// the cluster's, and what anyone posted to the CloudEvents receiver.
func (p *transitionPrinter) print(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.out, terminal.Line(line))
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
