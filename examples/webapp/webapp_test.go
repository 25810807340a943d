package webapp_test

import (
	"context"
	"io/fs"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kfsm/kfsm/examples/webapp"
	"github.com/kfsm/kfsm/examples/webapp/dns"
	"github.com/kfsm/kfsm/examples/webapp/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/doccheck"
)

func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDs:        []fs.FS{webapp.CRDs},
		Roles:       []fs.FS{webapp.Role},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		// The workloads tier makes Deployments Available for real.
		Workloads:   true,
		MinCoverage: 100,
	})
}

// registries holds each test's DNS registry. It stands outside the
// operator, as a DNS provider would, so it outlives the operator's
// crashes: one per Env, not one per operator process.
var registries struct {
	sync.Mutex
	of map[*fsmtest.Env]*dns.Registry
}

// registry returns e's DNS registry, started on first use.
func registry(e *fsmtest.Env) *dns.Registry {
	registries.Lock()
	defer registries.Unlock()
	if r, ok := registries.of[e]; ok {
		return r
	}
	r, err := dns.Start("127.0.0.1:0")
	if err != nil {
		e.T.Fatal(err)
	}
	if registries.of == nil {
		registries.of = map[*fsmtest.Env]*dns.Registry{}
	}
	registries.of[e] = r
	e.T.Cleanup(func() {
		registries.Lock()
		delete(registries.of, e)
		registries.Unlock()
		_ = r.Close()
	})
	return r
}

// operator is the web app machine of one operator process, calling e's
// DNS registry.
//
// The registry is a system outside the cluster: under Faults and Explore
// each request of the operator to it may fail, or lose its answer or
// time out after the registry took it, and its records may be removed
// behind the operator, as someone cleaning up a DNS zone by hand would.
func operator(e *fsmtest.Env) *fsm.Machine[*v1alpha1.WebApp] {
	system := e.Outside("dns")
	system.Drift("records-removed", func() {
		r := registry(e)
		c := &dns.Client{URL: r.URL()}
		for name := range r.Records() {
			if err := c.Deregister(context.Background(), name); err != nil {
				e.T.Errorf("removing %s behind the operator: %v", name, err)
			}
		}
	})
	op := &webapp.Operator{DNS: &dns.Client{URL: registry(e).URL(), HTTP: &http.Client{Transport: system.Transport(nil), Timeout: time.Minute}}}
	return op.Machine()
}

func shop() *v1alpha1.WebApp {
	return &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "shop"},
		Spec: v1alpha1.WebAppSpec{
			Image: "registry.example/shop:1.0", Replicas: ptr.To[int32](2), Expose: ptr.To(true),
			Config: map[string]string{"GREETING": "hello"}, DNSName: "shop.example.com",
		},
	}
}

// record is where e's registry points name, or "".
func record(e *fsmtest.Env, name string) string { return registry(e).Records()[name] }

func TestWebAppLifecycle(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, operator(e))
	app := shop()
	e.Create(app)

	// Ready, as kubectl wait --for=condition=Ready sees it, and Current
	// for kstatus.
	e.AwaitReady(app)
	if app.Status.State != webapp.Serving || app.Status.AvailableReplicas != 2 {
		t.Errorf("state %s with %d available, want Serving with 2", app.Status.State, app.Status.AvailableReplicas)
	}
	children := []fsmtest.Child{
		{Kind: "ConfigMap", Namespace: e.Namespace, Name: "shop-config"},
		{Kind: "Deployment", Namespace: e.Namespace, Name: "shop"},
		{Kind: "Service", Namespace: e.Namespace, Name: "shop"},
	}
	if diff := cmp.Diff(children, e.Children(app)); diff != "" {
		t.Fatalf("children (-want +got):\n%s", diff)
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	if e.Get(d); d.Status.AvailableReplicas != 2 {
		t.Errorf("the Deployment has %d available replicas, want 2 (run by the workloads tier)", d.Status.AvailableReplicas)
	}
	if got := record(e, "shop.example.com"); got != "shop."+e.Namespace+".svc.cluster.local" {
		t.Errorf("the DNS record points at %q", got)
	}

	// Un-exposed: the Service is pruned once the pass is Ready, and the
	// rest stays; exposed again: it is back.
	e.Update(app, func() { app.Spec.Expose = ptr.To(false) })
	e.AwaitReady(app)
	if diff := cmp.Diff(children[:2], e.Children(app)); diff != "" {
		t.Fatalf("children once un-exposed (-want +got):\n%s", diff)
	}
	e.Update(app, func() { app.Spec.Expose = ptr.To(true) })
	e.AwaitReady(app)
	if diff := cmp.Diff(children, e.Children(app)); diff != "" {
		t.Fatalf("children once exposed again (-want +got):\n%s", diff)
	}

	// Deleted: the DNS record goes, then the finalizer, then the app.
	e.Delete(app)
	e.AwaitGone(app)
	if got := e.Transitions(app); got[len(got)-1] != "delete→Deregistered" {
		t.Errorf("the app's transitions %v end without its deregistration", got)
	}
	if got := record(e, "shop.example.com"); got != "" {
		t.Errorf("the DNS record outlived the app, pointing at %q", got)
	}
}

// A new DNS name moves the app's record, and a removed one removes it:
// the record the operator registered is removed, not leaked, and the
// status names the one registered now. Deletion removes what is left.
func TestAChangedDNSNameMovesTheRecord(t *testing.T) {
	for name, to := range map[string]string{"Changed": "b.example.com", "Removed": ""} {
		t.Run(name, func(t *testing.T) {
			e := fsmtest.New(t)
			fsmtest.Run(e, operator(e))
			app := &v1alpha1.WebApp{
				ObjectMeta: metav1.ObjectMeta{Name: "news"},
				Spec:       v1alpha1.WebAppSpec{Image: "registry.example/news:1", Replicas: ptr.To[int32](1), DNSName: "a.example.com"},
			}
			target := "news." + e.Namespace + ".svc.cluster.local"
			records := func(names ...string) map[string]string {
				want := map[string]string{}
				for _, n := range names {
					want[n] = target
				}
				return want
			}
			e.Create(app)
			e.AwaitReady(app)
			if diff := cmp.Diff(records("a.example.com"), registry(e).Records()); diff != "" {
				t.Fatalf("the DNS records once Ready (-want +got):\n%s", diff)
			}
			if app.Status.RegisteredDNSName != "a.example.com" {
				t.Errorf("the status records %q as registered, want a.example.com", app.Status.RegisteredDNSName)
			}

			e.Update(app, func() { app.Spec.DNSName = to })
			e.AwaitReady(app)
			want := records()
			if to != "" {
				want = records(to)
			}
			if diff := cmp.Diff(want, registry(e).Records()); diff != "" {
				t.Errorf("the DNS records once Ready with dnsName %q (-want +got):\n%s", to, diff)
			}
			if app.Status.RegisteredDNSName != to {
				t.Errorf("the status records %q as registered, want %q", app.Status.RegisteredDNSName, to)
			}

			e.Delete(app)
			e.AwaitGone(app)
			if got := registry(e).Records(); len(got) != 0 {
				t.Errorf("the DNS records outlived the app: %v", got)
			}
		})
	}
}

// A web app scaled to zero runs no copies: zero is a replica count, not
// "unset, so one".
func TestAWebAppScaledToZeroRunsNoCopies(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, operator(e))
	app := shop()
	e.Create(app)
	e.AwaitReady(app)
	e.Update(app, func() { app.Spec.Replicas = ptr.To[int32](0) })
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	e.Await("the Deployment scaled to zero", func() bool { return e.Get(d) && d.Spec.Replicas != nil && *d.Spec.Replicas == 0 })
	if e.Get(app); app.Spec.Replicas == nil || *app.Spec.Replicas != 0 {
		t.Errorf("the web app's replicas read back as %v, want 0", app.Spec.Replicas)
	}
}

func TestDeletionWaitsForTheDNSRegistry(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, operator(e).WithClock(e.Clock))
	app := &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "blog"},
		Spec:       v1alpha1.WebAppSpec{Image: "registry.example/blog:2", Replicas: ptr.To[int32](1), DNSName: "blog.example.com"},
	}
	e.Create(app)
	e.AwaitReady(app)

	if err := registry(e).Close(); err != nil {
		t.Fatal(err)
	}
	e.Delete(app)
	e.Await("the deregistration to fail", func() bool {
		e.Get(app)
		c := meta.FindStatusCondition(app.Status.Conditions, string(webapp.Deregistered))
		return c != nil && c.Reason == fsm.ReasonHandlerFailed
	})
	if len(app.Finalizers) == 0 {
		t.Fatal("the finalizer went while the DNS record could not be removed")
	}
	if record(e, "blog.example.com") == "" {
		t.Fatal("the record is gone although the registry was down")
	}
	if app.Status.RetryAt == nil {
		t.Fatal("no retry is planned")
	}

	// The registry is back: the retry, when the clock reaches it, removes
	// the record, and the app goes.
	if err := registry(e).Restart(); err != nil {
		t.Fatal(err)
	}
	e.Clock.Step(app.Status.RetryAt.Sub(e.Clock.Now()))
	e.AwaitGone(app)
	if got := record(e, "blog.example.com"); got != "" {
		t.Errorf("the DNS record outlived the app, pointing at %q", got)
	}
}

func TestInvalidConfigStopsTheApp(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, operator(e))
	app := &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec:       v1alpha1.WebAppSpec{Image: "x", Config: map[string]string{"not valid": "1"}},
	}
	e.Create(app)
	e.AwaitCondition(app, fsm.ConditionStalled, metav1.ConditionTrue)
	if c := meta.FindStatusCondition(app.Status.Conditions, fsm.ConditionStalled); c.Reason != "InvalidConfig" {
		t.Errorf("the app stalled for %s (%s), want InvalidConfig", c.Reason, c.Message)
	}
	if got := e.Children(app); len(got) != 0 {
		t.Errorf("a stopped app applied %v", got)
	}
	if e.Get(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bad-config"}}) {
		t.Error("a stopped app applied its ConfigMap")
	}
}

// An app in flight across the upgrade to version 2, which renamed
// Registered to Published: an operator of version 1 leaves it in
// Registered, failing while the DNS registry is down; version 2 takes
// over and moves it to Published, its condition with it, keeping its
// failures, its retry, its history and its children; once the registry
// is back, it serves.
func TestVersionTwoMigratesAnAppInFlight(t *testing.T) {
	e := fsmtest.New(t)
	upgraded := false // read by the machine function, which each process calls
	fsmtest.RunFunc(e, func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.WebApp] {
		op := &webapp.Operator{DNS: &dns.Client{URL: registry(e).URL()}}
		if upgraded {
			return op.Machine().WithClock(e.Clock)
		}
		return op.VersionOne().WithClock(e.Clock)
	})
	if err := registry(e).Close(); err != nil {
		t.Fatal(err)
	}
	app := shop()
	e.Create(app)
	e.Await("the registration to fail in version 1", func() bool {
		e.Get(app)
		c := meta.FindStatusCondition(app.Status.Conditions, "Registered")
		return app.Status.State == "Registered" && c != nil && c.Reason == fsm.ReasonHandlerFailed && app.Status.RetryAt != nil
	})
	children := map[string]types.UID{}
	for _, c := range app.Status.Outputs {
		children[c.Kind+"/"+c.Name] = c.UID
	}
	history, failures, retryAt := app.Status.History, app.Status.Failures, app.Status.RetryAt.DeepCopy()

	upgraded = true
	e.RestartOperator()
	e.Await("version 2 to migrate the app", func() bool {
		e.Get(app)
		return app.Status.GraphVersion == 2
	})
	if app.Status.State != webapp.Published {
		t.Errorf("the app is in %s after the migration, want Published", app.Status.State)
	}
	if c := meta.FindStatusCondition(app.Status.Conditions, "Registered"); c != nil {
		t.Errorf("the condition Registered outlived the migration: %+v", c)
	}
	if c := meta.FindStatusCondition(app.Status.Conditions, string(webapp.Published)); c == nil || c.Reason != fsm.ReasonHandlerFailed {
		t.Errorf("the condition Published after the migration is %+v, want version 1's failure under the new name", c)
	}
	if app.Status.Failures != failures || app.Status.RetryAt == nil || !app.Status.RetryAt.Equal(retryAt) {
		t.Errorf("failures %d retrying at %v after the migration, want %d at %v", app.Status.Failures, app.Status.RetryAt, failures, retryAt)
	}
	if n := len(history); len(app.Status.History) < n || !cmp.Equal(app.Status.History[:n], history) {
		t.Errorf("the history lost what version 1 wrote:\nbefore %v\nafter  %v", history, app.Status.History)
	}
	if last := app.Status.History[len(app.Status.History)-1]; last.Reason != fsm.ReasonMigrated || last.To != webapp.Published {
		t.Errorf("the history ends with %+v, want the move to Published marked Migrated", last)
	}

	if err := registry(e).Restart(); err != nil {
		t.Fatal(err)
	}
	e.Clock.Step(app.Status.RetryAt.Sub(e.Clock.Now()))
	e.AwaitReady(app)
	if app.Status.State != webapp.Serving {
		t.Errorf("the app is in %s once the registry is back, want Serving", app.Status.State)
	}
	for _, c := range app.Status.Outputs {
		if uid, ok := children[c.Kind+"/"+c.Name]; ok && uid != c.UID {
			t.Errorf("%s %s was made anew across the upgrade: UID %s, was %s", c.Kind, c.Name, c.UID, uid)
		}
	}
	if got := record(e, "shop.example.com"); got != "shop."+e.Namespace+".svc.cluster.local" {
		t.Errorf("the DNS record points at %q", got)
	}
}

// A web app's life under every combination of faults that fsmtest
// explores (two at a time with -kfsm.depth=2, as make explore runs it):
// created, un-exposed, reconfigured, renamed and deleted, its DNS record
// following it.
func TestWebAppSurvivesFaults(t *testing.T) {
	machine, scenario, opts := underFaults(t)
	fsmtest.Explore(t, machine, scenario, opts...)
}

// underFaults is the machine, the main scenario and the options of the
// fault tests: TestWebAppSurvivesFaults's, and the seeded-bug check's.
func underFaults(*testing.T) (func(*fsmtest.Env) *fsm.Machine[*v1alpha1.WebApp], func(*fsmtest.Env), []fsmtest.FaultOption) {
	return operator, func(e *fsmtest.Env) {
		app := shop()
		e.Create(app)
		e.AwaitReady(app)
		target := "shop." + e.Namespace + ".svc.cluster.local"
		e.Await("the DNS record", func() bool { return record(e, "shop.example.com") == target })
		e.Update(app, func() { app.Spec.Expose = ptr.To(false) })
		e.AwaitReady(app)
		e.Update(app, func() { app.Spec.Config["GREETING"] = "hi" })
		e.AwaitReady(app)
		e.Update(app, func() { app.Spec.DNSName = "shop.example.org" })
		e.AwaitReady(app)
		moved := map[string]string{"shop.example.org": target}
		e.Await("the DNS record to move", func() bool { return cmp.Equal(moved, registry(e).Records()) })
		e.Delete(app)
		e.AwaitGone(app)
		e.Await("every DNS record to go", func() bool { return len(registry(e).Records()) == 0 })
	}, nil
}

func TestReadmeDiagramIsCurrent(t *testing.T) {
	doccheck.ReadmeHasDiagram(t, (&webapp.Operator{}).Machine().Graph().Mermaid())
}
