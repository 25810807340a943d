package autoupdate_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/examples/autoupdate"
	"github.com/kfsm/kfsm/examples/autoupdate/host"
	versionpb "github.com/kfsm/kfsm/examples/autoupdate/proto"
	"github.com/kfsm/kfsm/examples/autoupdate/v1alpha1"
	"github.com/kfsm/kfsm/examples/autoupdate/versionserver"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/doccheck"
)

func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDs:        []fs.FS{autoupdate.CRDs},
		Roles:       []fs.FS{autoupdate.Role},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		MinCoverage: 100,
	})
}

// step is one step of the talk's story: what the version server does,
// and what must hold once the operator has acted on it.
type step struct {
	name    string
	publish *versionpb.Package
	down    bool
	version string
	running []string
	failed  []string
}

// story is the talk's story, scripted step by step on a real gRPC server.
var story = []step{
	{name: "first install", publish: release("1.0.0", false), version: "1.0.0", running: []string{"1.0.0"}},
	{name: "good upgrade", publish: release("1.1.0", false), version: "1.1.0", running: []string{"1.1.0"}},
	{name: "bad upgrade", publish: release("1.2.0", true), version: "1.1.0", running: []string{"1.1.0"}, failed: []string{"1.2.0"}},
	{name: "the bad version offered again", publish: release("1.2.0", true), version: "1.1.0", running: []string{"1.1.0"}, failed: []string{"1.2.0"}},
	{name: "a later good version", publish: release("1.3.0", false), version: "1.3.0", running: []string{"1.3.0"}, failed: []string{"1.2.0"}},
	{name: "server unavailable", down: true, version: "1.3.0", running: []string{"1.3.0"}, failed: []string{"1.2.0"}},
}

func TestUpgradesFollowTheVersionServer(t *testing.T) {
	t.Parallel()
	e := fsmtest.New(t)
	w := worldOf(e)
	fsmtest.Run(e, w.operator().Machine())
	mc := agent()
	for i, s := range story {
		reached := w.play(e, s)
		if i == 0 {
			e.Create(mc)
		}
		e.Await(s.name, func() bool { return reached(mc) })
		if why := w.holds(e, mc, s); why != "" {
			t.Errorf("%s: %s", s.name, why)
		}
	}

	// The broken build was started once, never again.
	if n := w.host.Starts("agent-1-2-0"); n != 1 {
		t.Errorf("the broken version was started %d times, want 1", n)
	}
	// The client kept running while the server was down, and says so.
	e.Get(mc)
	if !meta.IsStatusConditionTrue(mc.Status.Conditions, fsm.ConditionReady) {
		t.Error("a client whose version server is down is no longer Ready, although it runs")
	}
	e.Await("the warnings as events", func() bool {
		var reasons []string
		for _, ev := range e.Events(mc) {
			if ev.Type == corev1.EventTypeWarning {
				reasons = append(reasons, ev.Reason)
			}
		}
		return slices.Contains(reasons, "VersionFailed") && slices.Contains(reasons, "VersionServerUnavailable")
	})
}

// The story under every combination of faults that fsmtest explores (two
// at a time with -kfsm.depth=2, as make explore runs it): the client
// reaches the same status at every step as in a clean run, and the host
// runs the same instances. Each run has a world of its own, which outlives
// the operator's crashes; its instances listen on addresses of their own,
// left out of the comparison. So is status.serverError: it reports the
// version server's last answer, which a fault fails on purpose, and the
// client polls on; each step awaits it empty while the server is up, and
// the outage's text while it is down. There is no burst to make: the story's
// changes are the version server's, and the client changes only when it
// is created and deleted.
func TestUpgradesSurviveFaults(t *testing.T) {
	t.Parallel()
	machine, scenario, opts := underFaults(t)
	fsmtest.Explore(t, machine, scenario, opts...)
}

// underFaults is the machine, the main scenario and the options of the
// fault tests: TestUpgradesSurviveFaults's, and the seeded-bug check's.
func underFaults(*testing.T) (func(*fsmtest.Env) *fsm.Machine[*v1alpha1.ManagedClient], func(*fsmtest.Env), []fsmtest.FaultOption) {
	machine := func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.ManagedClient] {
		return worldOf(e).outside(e).Machine()
	}
	return machine, func(e *fsmtest.Env) {
		w := worldOf(e)
		mc := agent()
		for i, s := range story {
			reached := w.play(e, s)
			if i == 0 {
				e.Create(mc)
			}
			await(e, s.name, func() string {
				if !reached(mc) {
					return "not reached: " + where(mc)
				}
				return w.holds(e, mc, s)
			})
		}
		e.Delete(mc)
		e.AwaitGone(mc)
		await(e, "no instance to outlive its client", func() string {
			if got := w.running(); len(got) != 0 {
				return fmt.Sprintf("instances %v still run", got)
			}
			return ""
		})
	}, []fsmtest.FaultOption{fsmtest.Ignore("address", "serverError")}
}

func TestRestartMidUpgradeCompletesIt(t *testing.T) {
	t.Parallel()
	e := fsmtest.New(t)
	w := worldOf(e)
	op := fsmtest.Run(e, w.operator().Machine())
	w.versions.Publish("stable", release("1.0.0", false))
	mc := agent()
	e.Create(mc)
	at(e, mc, "1.0.0")

	// A release that takes two seconds to start: restart the operator
	// while it is health-checking it.
	slow := release("2.0.0", false)
	slow.Runtime.StartupMillis = 2000
	w.versions.Publish("stable", slow)
	e.AwaitState(mc, autoupdate.Updating)
	op.Restart()

	at(e, mc, "2.0.0")
	if len(mc.Status.FailedVersions) != 0 || mc.Status.HealthFailures != 0 {
		t.Errorf("failed versions %v, health failures %d after the restart; want none", mc.Status.FailedVersions, mc.Status.HealthFailures)
	}
	if n := w.host.Starts("agent-2-0-0"); n != 1 {
		t.Errorf("the new version was started %d times, want once: the restart found the running instance", n)
	}
	if diff := cmp.Diff([]string{"2.0.0"}, w.running()); diff != "" {
		t.Errorf("running instances (-want +got):\n%s", diff)
	}
}

func TestDeletingTheClientStopsItsInstances(t *testing.T) {
	t.Parallel()
	e := fsmtest.New(t)
	w := worldOf(e)
	fsmtest.Run(e, w.operator().Machine())
	w.versions.Publish("stable", release("1.0.0", false))
	mc := agent()
	e.Create(mc)
	at(e, mc, "1.0.0")
	e.Delete(mc)
	e.AwaitGone(mc)
	if got := w.running(); len(got) != 0 {
		t.Errorf("instances %v outlived their client", got)
	}
}

// A first release whose instance never gets healthy fails when Updating
// times out, on the fake clock, and the client waits for another one.
func TestAReleaseThatNeverStartsTimesOut(t *testing.T) {
	t.Parallel()
	e := fsmtest.New(t)
	w := worldOf(e)
	op := w.operator()
	fsmtest.Run(e, op.Machine().WithClock(e.Clock))
	hung := release("1.0.0", false)
	hung.Runtime.StartupMillis = int32(time.Hour / time.Millisecond)
	w.versions.Publish("stable", hung)
	mc := agent()
	e.Create(mc)
	e.Await("the instance to be starting", func() bool {
		return e.State(mc) == autoupdate.Updating && slices.Equal(w.running(), []string{"1.0.0"})
	})

	e.Clock.Step(op.UpdateTimeout)
	e.AwaitState(mc, autoupdate.Start)
	if diff := cmp.Diff([]string{"1.0.0"}, mc.Status.FailedVersions); diff != "" {
		t.Errorf("failed versions (-want +got):\n%s", diff)
	}
	if mc.Status.Version != "" || mc.Status.Target.Version != "" || len(mc.Status.Instances) != 0 {
		t.Errorf("version %q, target %+v, instances %+v; want none", mc.Status.Version, mc.Status.Target, mc.Status.Instances)
	}
	if got := w.running(); len(got) != 0 {
		t.Errorf("the timed-out instance still runs: %v", got)
	}
	want := []string{"Start→Updating", "Updating→Failed (timeout)", "Failed→Start"}
	if diff := cmp.Diff(want, e.Transitions(mc)); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
}

func TestReadmeDiagramIsCurrent(t *testing.T) {
	doccheck.ReadmeHasDiagram(t, (&autoupdate.Operator{}).Machine().Graph().Mermaid())
}

// world is what the operator drives beside the API server: a real gRPC
// version server and an instance host, on loopback. Each Env has one,
// and it outlives the operator's restarts and crashes, as the real ones
// would.
type world struct {
	versions *versionserver.Server
	host     *host.Host
	conn     *grpc.ClientConn
}

var worlds = struct {
	sync.Mutex
	byNamespace map[string]*world
}{byNamespace: map[string]*world{}}

// worldOf returns e's world, and starts it the first time, until e's
// test ends.
func worldOf(e *fsmtest.Env) *world {
	worlds.Lock()
	defer worlds.Unlock()
	if w, ok := worlds.byNamespace[e.Namespace]; ok {
		return w
	}
	versions, err := versionserver.Start("127.0.0.1:0")
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(versions.Stop)
	h, err := host.Start("127.0.0.1:0")
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { _ = h.Close() })
	conn, err := grpc.NewClient(versions.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { _ = conn.Close() })
	w := &world{versions: versions, host: h, conn: conn}
	worlds.byNamespace[e.Namespace] = w
	e.T.Cleanup(func() {
		worlds.Lock()
		defer worlds.Unlock()
		delete(worlds.byNamespace, e.Namespace)
	})
	return w
}

// operator is a new operator process's view of the world, with short
// timings.
func (w *world) operator() *autoupdate.Operator {
	return &autoupdate.Operator{
		Versions: versionpb.NewVersionServiceClient(w.conn),
		Host:     &host.Client{URL: w.host.URL()},
		Poll:     100 * time.Millisecond, HealthEvery: 50 * time.Millisecond, HealthTimeout: 500 * time.Millisecond,
	}
}

// outside is operator, with each call to the version server and the
// host made through them declared as systems outside the cluster: a
// fault may fail a call before it reaches them, or lose its answer, or
// time it out, after they took it. And the host drifts as a real one
// does: it restarts, and forgets the instances it ran.
func (w *world) outside(e *fsmtest.Env) *autoupdate.Operator {
	op := w.operator()
	versions := e.Outside("versions")
	op.Versions = outsideVersions{versions, op.Versions}
	host := e.Outside("host")
	host.Drift("restarted", w.host.Restart)
	op.Host.HTTP = &http.Client{Transport: host.Transport(nil), Timeout: time.Minute}
	return op
}

// outsideVersions asks the version server through system.
type outsideVersions struct {
	system *fsmtest.Outside
	versionpb.VersionServiceClient
}

func (v outsideVersions) GetVersion(ctx context.Context, in *versionpb.GetVersionRequest, opts ...grpc.CallOption) (resp *versionpb.GetVersionResponse, err error) {
	err = v.system.Read("GetVersion", func() error {
		resp, err = v.VersionServiceClient.GetVersion(ctx, in, opts...)
		return err
	})
	return resp, err
}

// play makes the version server do what s says, and returns when the
// operator has acted on it: the client has what s expects, at rest, and
// while the server is up, its last answer reached the operator (a fault
// may fail one ask, and the status says so until the next).
func (w *world) play(e *fsmtest.Env, s step) func(*v1alpha1.ManagedClient) bool {
	if s.publish != nil {
		w.versions.Publish("stable", s.publish)
	}
	w.versions.SetAvailable(!s.down)
	switch {
	case s.down:
		return func(mc *v1alpha1.ManagedClient) bool {
			return e.Get(mc) && strings.Contains(mc.Status.ServerError, "down for maintenance")
		}
	case len(s.failed) > 0 && s.version != s.publish.GetVersion():
		// Refused: wait until the server was asked about it twice more.
		asked := w.versions.Asked()
		return func(mc *v1alpha1.ManagedClient) bool {
			return w.versions.Asked() >= asked+2 && e.Get(mc) && slices.Contains(mc.Status.FailedVersions, s.publish.GetVersion()) &&
				settled(mc, s.version) && mc.Status.ServerError == ""
		}
	}
	return func(mc *v1alpha1.ManagedClient) bool {
		return e.Get(mc) && settled(mc, s.version) && mc.Status.ServerError == ""
	}
}

// holds says how mc, read, and the host differ from what s expects, or
// "" when they do not.
func (w *world) holds(e *fsmtest.Env, mc *v1alpha1.ManagedClient, s step) string {
	var why []string
	if diff := cmp.Diff(s.running, w.running()); diff != "" {
		why = append(why, fmt.Sprintf("running instances (-want +got):\n%s", diff))
	}
	if diff := cmp.Diff(s.failed, mc.Status.FailedVersions); diff != "" {
		why = append(why, fmt.Sprintf("failed versions (-want +got):\n%s", diff))
	}
	if len(mc.Status.Instances) != 1 || mc.Status.Instances[0].State != v1alpha1.InstanceProcessed {
		return strings.Join(append(why, fmt.Sprintf("status.instances = %+v, want the one processed instance", mc.Status.Instances)), "; ")
	}
	// The instance that runs really serves.
	hc := &host.Client{URL: w.host.URL()}
	if health, err := hc.Check(e.T.Context(), mc.Status.Instances[0].Address, time.Second); health != host.Healthy {
		why = append(why, fmt.Sprintf("the running instance answers %v (%v), want healthy", health, err))
	}
	return strings.Join(why, "; ")
}

// running is the versions of the instances the host runs.
func (w *world) running() []string {
	var out []string
	for _, in := range w.host.Instances() {
		out = append(out, in.Version)
	}
	return out
}

// agent is the managed client every test manages, on channel stable.
func agent() *v1alpha1.ManagedClient {
	return &v1alpha1.ManagedClient{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Spec: v1alpha1.ManagedClientSpec{Channel: "stable"}}
}

func release(version string, broken bool) *versionpb.Package {
	return &versionpb.Package{
		Name: "agent", Version: version, ConfigYaml: "log: info\n",
		Runtime: &versionpb.Runtime{StartupMillis: 100, Broken: broken},
	}
}

// settled reports whether mc runs version, at rest.
func settled(mc *v1alpha1.ManagedClient, version string) bool {
	return mc.Status.State == autoupdate.Processed && mc.Status.Version == version &&
		meta.IsStatusConditionTrue(mc.Status.Conditions, fsm.ConditionReady)
}

// at awaits mc at rest on version, Ready for its spec; mc is read.
func at(e *fsmtest.Env, mc *v1alpha1.ManagedClient, version string) {
	e.T.Helper()
	e.AwaitReady(mc)
	e.Await(fmt.Sprintf("%s to run %s", mc.Name, version), func() bool { return e.Get(mc) && settled(mc, version) })
}

// await is Env.Await for a condition that says why it does not hold
// yet: a failure shows the last reason.
func await(e *fsmtest.Env, what string, why func() string) {
	e.T.Helper()
	last := ""
	defer func() {
		if e.T.Failed() && last != "" {
			e.T.Logf("%s: at last, %s", what, last)
		}
	}()
	e.Await(what, func() bool {
		last = why()
		return last == ""
	})
}

// where says where mc is, for failure messages.
func where(mc *v1alpha1.ManagedClient) string {
	return fmt.Sprintf("state %s, version %q, failed %v, server error %q", mc.Status.State, mc.Status.Version, mc.Status.FailedVersions, mc.Status.ServerError)
}
