package autoupdate_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/examples/autoupdate"
	"github.com/kfsm/kfsm/examples/autoupdate/host"
	versionpb "github.com/kfsm/kfsm/examples/autoupdate/proto"
	"github.com/kfsm/kfsm/examples/autoupdate/v1alpha1"
	"github.com/kfsm/kfsm/examples/autoupdate/versionserver"
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
	testenv.Main(m, cluster.Options{CRDPaths: []string{"crd"}}, func(c *cluster.Cluster) { testCluster = c })
}

// env is one test's world: a namespace, a real gRPC version server and an
// instance host on loopback, and the operator, which can be restarted.
type env struct {
	t        *testing.T
	c        client.Client
	ns       string
	versions *versionserver.Server
	host     *host.Host
	stop     func()
}

func start(t *testing.T) *env {
	t.Helper()
	c, err := client.New(testCluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, c, "autoupdate")
	versions, err := versionserver.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(versions.Stop)
	h, err := host.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	e := &env{t: t, c: c, ns: ns, versions: versions, host: h}
	e.startOperator()
	return e
}

// startOperator runs the operator in a manager of its own.
func (e *env) startOperator() {
	e.t.Helper()
	conn, err := grpc.NewClient(e.versions.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	op := &autoupdate.Operator{
		Versions: versionpb.NewVersionServiceClient(conn),
		Host:     &host.Client{URL: e.host.URL()},
		Poll:     300 * time.Millisecond, HealthEvery: 100 * time.Millisecond, HealthTimeout: 500 * time.Millisecond,
	}
	e.stop = testenv.StartManager(e.t, testCluster.Config, scheme, e.ns, op.Machine().SetupWithManager)
}

// create creates the managed client "agent", on channel stable.
func (e *env) create() {
	e.t.Helper()
	mc := &v1alpha1.ManagedClient{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: e.ns}, Spec: v1alpha1.ManagedClientSpec{Channel: "stable"}}
	if err := e.c.Create(e.t.Context(), mc); err != nil {
		e.t.Fatal(err)
	}
}

// agent reads the managed client "agent", the one every test manages.
func (e *env) agent() *v1alpha1.ManagedClient {
	e.t.Helper()
	var mc v1alpha1.ManagedClient
	if err := e.c.Get(e.t.Context(), client.ObjectKey{Namespace: e.ns, Name: "agent"}, &mc); err != nil {
		e.t.Fatal(err)
	}
	return &mc
}

func release(version string, broken bool) *versionpb.Package {
	return &versionpb.Package{
		Name: "agent", Version: version, ConfigYaml: "log: info\n",
		Runtime: &versionpb.Runtime{StartupMillis: 200, Broken: broken},
	}
}

// running is the versions of the instances the host runs.
func (e *env) running() []string {
	var out []string
	for _, in := range e.host.Instances() {
		out = append(out, in.Version)
	}
	return out
}

// settled reports whether the client "agent" runs version, at rest.
func (e *env) settled(version string) func() bool {
	return func() bool {
		mc := e.agent()
		return mc.Status.State == autoupdate.Processed && mc.Status.Version == version &&
			meta.IsStatusConditionTrue(mc.Status.Conditions, fsm.ConditionReady)
	}
}

// The talk's story, scripted step by step on a real gRPC server.
func TestUpgradesFollowTheVersionServer(t *testing.T) {
	e := start(t)
	script := []struct {
		name    string
		publish *versionpb.Package
		down    bool
		// what must hold afterwards
		version string
		running []string
		failed  []string
	}{
		{name: "first install", publish: release("1.0.0", false), version: "1.0.0", running: []string{"1.0.0"}},
		{name: "good upgrade", publish: release("1.1.0", false), version: "1.1.0", running: []string{"1.1.0"}},
		{name: "bad upgrade", publish: release("1.2.0", true), version: "1.1.0", running: []string{"1.1.0"}, failed: []string{"1.2.0"}},
		{name: "the bad version offered again", publish: release("1.2.0", true), version: "1.1.0", running: []string{"1.1.0"}, failed: []string{"1.2.0"}},
		{name: "a later good version", publish: release("1.3.0", false), version: "1.3.0", running: []string{"1.3.0"}, failed: []string{"1.2.0"}},
		{name: "server unavailable", down: true, version: "1.3.0", running: []string{"1.3.0"}, failed: []string{"1.2.0"}},
	}
	for i, step := range script {
		if step.publish != nil {
			e.versions.Publish("stable", step.publish)
		}
		e.versions.SetAvailable(!step.down)
		if i == 0 {
			e.create()
		}
		switch {
		case step.down:
			testenv.Poll(t, step.name, func() bool { return strings.Contains(e.agent().Status.ServerError, "down for maintenance") })
		case len(step.failed) > 0 && step.version != step.publish.GetVersion():
			// Refused: wait until the server was asked about it twice more.
			asked := e.versions.Asked()
			testenv.Poll(t, step.name, func() bool {
				return e.versions.Asked() >= asked+2 && slices.Contains(e.agent().Status.FailedVersions, step.publish.GetVersion()) && e.settled(step.version)()
			})
		default:
			testenv.Poll(t, step.name, e.settled(step.version))
		}
		mc := e.agent()
		if diff := cmp.Diff(step.running, e.running()); diff != "" {
			t.Errorf("%s: running instances (-want +got):\n%s", step.name, diff)
		}
		if diff := cmp.Diff(step.failed, mc.Status.FailedVersions); diff != "" {
			t.Errorf("%s: failed versions (-want +got):\n%s", step.name, diff)
		}
		if len(mc.Status.Instances) != 1 || mc.Status.Instances[0].Phase != autoupdate.PhaseProcessed {
			t.Fatalf("%s: status.instances = %+v, want the one processed instance", step.name, mc.Status.Instances)
		}
		// The instance that runs really serves.
		hc := &host.Client{URL: e.host.URL()}
		if health, err := hc.Check(t.Context(), mc.Status.Instances[0].Address, time.Second); health != host.Healthy {
			t.Errorf("%s: the running instance answers %v (%v), want healthy", step.name, health, err)
		}
	}

	// The broken build was started once, never again.
	if n := e.host.Starts("agent-1-2-0"); n != 1 {
		t.Errorf("the broken version was started %d times, want 1", n)
	}
	// The client kept running while the server was down, and says so.
	mc := e.agent()
	if !meta.IsStatusConditionTrue(mc.Status.Conditions, fsm.ConditionReady) {
		t.Error("a client whose version server is down is no longer Ready, although it runs")
	}
	testenv.Poll(t, "the warnings as events", func() bool {
		var list eventsv1.EventList
		if err := e.c.List(t.Context(), &list, client.InNamespace(e.ns)); err != nil {
			return false
		}
		var reasons []string
		for _, ev := range list.Items {
			if ev.Type == corev1.EventTypeWarning {
				reasons = append(reasons, ev.Reason)
			}
		}
		return slices.Contains(reasons, "VersionFailed") && slices.Contains(reasons, "VersionServerUnavailable")
	})
}

func TestRestartMidUpgradeCompletesIt(t *testing.T) {
	e := start(t)
	e.versions.Publish("stable", release("1.0.0", false))
	e.create()
	testenv.Poll(t, "the first install", e.settled("1.0.0"))

	// A release that takes two seconds to start: stop the operator while
	// it is health-checking it.
	slow := release("2.0.0", false)
	slow.Runtime.StartupMillis = 2000
	e.versions.Publish("stable", slow)
	testenv.Poll(t, "the upgrade to start", func() bool { return e.agent().Status.State == autoupdate.Updating })
	e.stop()

	e.startOperator()
	testenv.Poll(t, "the upgrade to complete after the restart", e.settled("2.0.0"))
	mc := e.agent()
	if len(mc.Status.FailedVersions) != 0 || mc.Status.HealthFailures != 0 {
		t.Errorf("failed versions %v, health failures %d after the restart; want none", mc.Status.FailedVersions, mc.Status.HealthFailures)
	}
	if n := e.host.Starts("agent-2-0-0"); n != 1 {
		t.Errorf("the new version was started %d times, want once: the restart found the running instance", n)
	}
	if diff := cmp.Diff([]string{"2.0.0"}, e.running()); diff != "" {
		t.Errorf("running instances (-want +got):\n%s", diff)
	}
}

func TestDeletingTheClientStopsItsInstances(t *testing.T) {
	e := start(t)
	e.versions.Publish("stable", release("1.0.0", false))
	e.create()
	testenv.Poll(t, "the first install", e.settled("1.0.0"))
	if err := e.c.Delete(t.Context(), e.agent()); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(t, "the client to be gone", func() bool {
		err := e.c.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "agent"}, &v1alpha1.ManagedClient{})
		return apierrors.IsNotFound(err)
	})
	if got := e.running(); len(got) != 0 {
		t.Errorf("instances %v outlived their client", got)
	}
}

func TestReadmeDiagramIsCurrent(t *testing.T) {
	testenv.ReadmeHasDiagram(t, (&autoupdate.Operator{}).Machine().Graph().Mermaid())
}
