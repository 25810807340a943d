package moose_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/examples/moose"
	"github.com/kfsm/kfsm/examples/moose/v1alpha1"
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

// herd is a test's herd: a namespace, a fake clock, and the moose
// machine run one reconcile at a time.
type herd struct {
	t     *testing.T
	c     client.Client
	ns    string
	clock *clocktesting.FakeClock
	r     reconcile.Reconciler
}

func newHerd(t *testing.T) *herd {
	t.Helper()
	c, err := client.New(testCluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	h := &herd{t: t, c: c, ns: testenv.Namespace(t, c, "moose"), clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	h.restart()
	return h
}

// restart replaces the operator: a new Herd with nothing in memory.
func (h *herd) restart() {
	animals := moose.NewHerd(1)
	animals.FriendChance = 1 // every look around makes a friend, if there is a stranger
	r, err := animals.Machine().WithClock(h.clock).Reconciler(h.c, &events.FakeRecorder{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.r = r
}

func (h *herd) add(name string, weight int32) error {
	return h.c.Create(h.t.Context(), &v1alpha1.Moose{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, Spec: v1alpha1.MooseSpec{Weight: weight}})
}

func (h *herd) reconcile(name string) *v1alpha1.Moose {
	h.t.Helper()
	key := client.ObjectKey{Namespace: h.ns, Name: name}
	if _, err := h.r.Reconcile(h.t.Context(), reconcile.Request{NamespacedName: key}); err != nil {
		h.t.Fatal(err)
	}
	var m v1alpha1.Moose
	if err := h.c.Get(h.t.Context(), key, &m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		h.t.Fatal(err)
	}
	return &m
}

func TestMooseWalksItsCycleAndMakesFriends(t *testing.T) {
	h := newHerd(t)
	for name, weight := range map[string]int32{"mabel": 200, "milo": 600} {
		if err := h.add(name, weight); err != nil {
			t.Fatal(err)
		}
	}

	// The first reconcile tags the moose and sets it roaming; looking
	// around, it meets the only other moose.
	mabel := h.reconcile("mabel")
	if mabel.Status.State != moose.Roaming || !cmp.Equal(mabel.Status.Friends, []string{"milo"}) {
		t.Fatalf("mabel is %s with friends %v, want Roaming with milo", mabel.Status.State, mabel.Status.Friends)
	}
	milo := h.reconcile("milo")
	if !cmp.Equal(milo.Status.Friends, []string{"mabel"}) {
		t.Errorf("milo's friends are %v, want mabel: friendship goes both ways", milo.Status.Friends)
	}

	// Milo (600 kg) roams for 10 s, then eats for 5 s and sleeps for 8 s.
	if got := moose.RoamFor(600); got != 10*time.Second {
		t.Fatalf("RoamFor(600) = %v, want 10s", got)
	}
	step := func(d time.Duration, want fsm.State) {
		t.Helper()
		h.clock.Step(d)
		if got := h.reconcile("milo").Status.State; got != want {
			t.Fatalf("after %v milo is %s, want %s", d, got, want)
		}
	}
	step(9*time.Second, moose.Roaming)
	step(time.Second, moose.Eating)
	step(4*time.Second, moose.Eating)
	step(time.Second, moose.Sleeping)
	step(8*time.Second, moose.Roaming)
	milo = h.reconcile("milo")
	var path []fsm.State
	for _, tr := range milo.Status.History {
		path = append(path, tr.To)
	}
	if diff := cmp.Diff([]fsm.State{moose.Tagged, moose.Roaming, moose.Eating, moose.Sleeping, moose.Roaming}, path); diff != "" {
		t.Errorf("milo's path (-want +got):\n%s", diff)
	}
	if milo.Status.Meals != 1 {
		t.Errorf("milo ate %d times, want 1", milo.Status.Meals)
	}

	// Mabel (200 kg, 30 s) is still roaming: lighter moose get hungry later.
	if got := h.reconcile("mabel").Status.State; got != moose.Roaming {
		t.Errorf("mabel is %s after 23 s, want Roaming", got)
	}
}

func TestReleasedMooseVanishesAndIsForgotten(t *testing.T) {
	h := newHerd(t)
	for _, name := range []string{"mabel", "milo"} {
		if err := h.add(name, 300); err != nil {
			t.Fatal(err)
		}
	}
	h.reconcile("mabel")
	h.reconcile("milo")
	// The operator restarts: friendships come back from the cluster.
	h.restart()
	if got := h.reconcile("milo").Status.Friends; !cmp.Equal(got, []string{"mabel"}) {
		t.Fatalf("after a restart milo's friends are %v, want mabel", got)
	}

	var milo v1alpha1.Moose
	if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: h.ns, Name: "milo"}, &milo); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(t.Context(), &milo); err != nil {
		t.Fatal(err)
	}
	if got := h.reconcile("milo"); got != nil {
		t.Fatalf("milo is still there after its release: %s, finalizers %v", got.Status.State, got.Finalizers)
	}
	if got := h.reconcile("mabel").Status.Friends; len(got) != 0 {
		t.Errorf("mabel still counts %v among her friends", got)
	}
}

func TestMooseNamesMustStartWithM(t *testing.T) {
	h := newHerd(t)
	err := h.add("george", 400)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `a moose's name must start with "m"`) {
		t.Errorf("creating george = %v, want refused because the name does not start with m", err)
	}
	for _, w := range []int32{0, 1001} {
		if err := h.add(fmt.Sprintf("moose-%d", w), w); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.weight") {
			t.Errorf("a moose of %d kg = %v, want refused naming spec.weight", w, err)
		}
	}
}

func TestKubectlShowsThePrinterColumns(t *testing.T) {
	h := newHerd(t)
	if err := h.add("mabel", 300); err != nil {
		t.Fatal(err)
	}
	h.reconcile("mabel")
	out, err := exec.CommandContext(t.Context(), testCluster.Assets.Kubectl(), "--kubeconfig", testCluster.Kubeconfig,
		"get", "moose", "-n", h.ns).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get moose: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if got := strings.Fields(lines[0]); !cmp.Equal(got, []string{"NAME", "STATE", "READY", "FRIENDS", "AGE"}) {
		t.Errorf("columns %v, want NAME STATE READY FRIENDS AGE", got)
	}
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "mabel") || !strings.Contains(lines[1], "Roaming") {
		t.Errorf("kubectl get moose printed:\n%s", out)
	}
}

func TestReadmeDiagramIsCurrent(t *testing.T) {
	testenv.ReadmeHasDiagram(t, moose.NewHerd(1).Machine().Graph().Mermaid())
}
