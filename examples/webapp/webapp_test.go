package webapp_test

import (
	"os/exec"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/examples/webapp"
	"github.com/kfsm/kfsm/examples/webapp/dns"
	"github.com/kfsm/kfsm/examples/webapp/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testenv"
)

var (
	testCluster *cluster.Cluster
	scheme      = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	// The workloads tier makes Deployments Available for real.
	testenv.Main(m, cluster.Options{CRDPaths: []string{"crd"}, Workloads: true}, func(c *cluster.Cluster) { testCluster = c })
}

// env runs the web app operator against the test cluster, in a namespace
// of its own, with a DNS registry on loopback.
type env struct {
	t        *testing.T
	c        client.Client
	ns       string
	registry *dns.Registry
}

func start(t *testing.T) *env {
	t.Helper()
	c, err := client.New(testCluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, c, "webapp")
	registry, err := dns.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = registry.Close() })

	op := &webapp.Operator{DNS: &dns.Client{URL: registry.URL()}}
	testenv.StartManager(t, testCluster.Config, scheme, ns, op.Machine().SetupWithManager)
	return &env{t: t, c: c, ns: ns, registry: registry}
}

func (e *env) key(name string) client.ObjectKey { return client.ObjectKey{Namespace: e.ns, Name: name} }

func (e *env) app(name string) *v1alpha1.WebApp {
	e.t.Helper()
	var a v1alpha1.WebApp
	if err := e.c.Get(e.t.Context(), e.key(name), &a); err != nil {
		e.t.Fatal(err)
	}
	return &a
}

func (e *env) exists(obj client.Object, name string) bool {
	e.t.Helper()
	err := e.c.Get(e.t.Context(), e.key(name), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return err == nil
}

func (e *env) change(name string, f func(*v1alpha1.WebAppSpec)) {
	e.t.Helper()
	a := e.app(name)
	f(&a.Spec)
	if err := e.c.Update(e.t.Context(), a); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) ready(name string) bool {
	a := e.app(name)
	c := meta.FindStatusCondition(a.Status.Conditions, fsm.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == a.Generation
}

func TestWebAppLifecycle(t *testing.T) {
	e := start(t)
	app := &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: e.ns},
		Spec: v1alpha1.WebAppSpec{
			Image: "registry.example/shop:1.0", Replicas: 2, Expose: true,
			Config: map[string]string{"GREETING": "hello"}, DNSName: "shop.example.com",
		},
	}
	if err := e.c.Create(t.Context(), app); err != nil {
		t.Fatal(err)
	}

	// kubectl wait returns once the app is Ready.
	out, err := exec.CommandContext(t.Context(), testCluster.Assets.Kubectl(), "--kubeconfig", testCluster.Kubeconfig,
		"-n", e.ns, "wait", "--for=condition=Ready", "webapp/shop", "--timeout=2m").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	a := e.app("shop")
	if a.Status.State != webapp.Serving || a.Status.AvailableReplicas != 2 {
		t.Errorf("state %s with %d available, want Serving with 2", a.Status.State, a.Status.AvailableReplicas)
	}
	var d appsv1.Deployment
	if !e.exists(&d, "shop") || !e.exists(&corev1.ConfigMap{}, "shop-config") || !e.exists(&corev1.Service{}, "shop") {
		t.Fatal("the Deployment, ConfigMap and Service are not all there")
	}
	if d.Status.AvailableReplicas != 2 {
		t.Errorf("the Deployment has %d available replicas, want 2 (run by the workloads tier)", d.Status.AvailableReplicas)
	}
	if got := e.registry.Records()["shop.example.com"]; got != "shop."+e.ns+".svc.cluster.local" {
		t.Errorf("the DNS record points at %q", got)
	}

	// Un-exposed: the Service is pruned; exposed again: it is back.
	e.change("shop", func(s *v1alpha1.WebAppSpec) { s.Expose = false })
	testenv.Poll(t, "the Service to be pruned", func() bool { return !e.exists(&corev1.Service{}, "shop") && e.ready("shop") })
	if !e.exists(&appsv1.Deployment{}, "shop") {
		t.Fatal("un-exposing removed the Deployment")
	}
	e.change("shop", func(s *v1alpha1.WebAppSpec) { s.Expose = true })
	testenv.Poll(t, "the Service to come back", func() bool { return e.exists(&corev1.Service{}, "shop") && e.ready("shop") })

	// Deleted: the DNS record goes, then the finalizer, then the app.
	if err := e.c.Delete(t.Context(), e.app("shop")); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(t, "the app to be gone", func() bool { return !e.exists(&v1alpha1.WebApp{}, "shop") })
	if _, ok := e.registry.Records()["shop.example.com"]; ok {
		t.Error("the DNS record outlived the app")
	}
}

func TestDeletionWaitsForTheDNSRegistry(t *testing.T) {
	e := start(t)
	app := &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "blog", Namespace: e.ns},
		Spec:       v1alpha1.WebAppSpec{Image: "registry.example/blog:2", Replicas: 1, DNSName: "blog.example.com"},
	}
	if err := e.c.Create(t.Context(), app); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(t, "the app to be Ready", func() bool { return e.ready("blog") })

	if err := e.registry.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(t.Context(), e.app("blog")); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(t, "the deregistration to fail", func() bool {
		c := meta.FindStatusCondition(e.app("blog").Status.Conditions, string(webapp.Deregistered))
		return c != nil && c.Reason == fsm.ReasonHandlerFailed
	})
	if a := e.app("blog"); len(a.Finalizers) == 0 {
		t.Fatal("the finalizer went while the DNS record could not be removed")
	}
	if _, ok := e.registry.Records()["blog.example.com"]; !ok {
		t.Fatal("the record is gone although the registry was down")
	}

	if err := e.registry.Restart(); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(t, "the app to be gone once the registry is back", func() bool { return !e.exists(&v1alpha1.WebApp{}, "blog") })
	if _, ok := e.registry.Records()["blog.example.com"]; ok {
		t.Error("the DNS record outlived the app")
	}
}

func TestInvalidConfigStopsTheApp(t *testing.T) {
	e := start(t)
	app := &v1alpha1.WebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: e.ns},
		Spec:       v1alpha1.WebAppSpec{Image: "x", Config: map[string]string{"not valid": "1"}},
	}
	if err := e.c.Create(t.Context(), app); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(t, "the app to stall", func() bool {
		c := meta.FindStatusCondition(e.app("bad").Status.Conditions, fsm.ConditionStalled)
		return c != nil && c.Reason == "InvalidConfig"
	})
	if e.exists(&corev1.ConfigMap{}, "bad-config") {
		t.Error("a stopped app applied its ConfigMap")
	}
}

func TestReadmeDiagramIsCurrent(t *testing.T) {
	testenv.ReadmeHasDiagram(t, (&webapp.Operator{}).Machine().Graph().Mermaid())
}
