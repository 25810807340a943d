package eventwriter_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// One API server serves every test of the package; each test works in a
// namespace of its own.
func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:    []string{filepath.Join("..", "..", "..", "internal", "testapi", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
}

// env is a test's view of the shared cluster: fsmtest's namespace, and a
// client of the API server.
type env struct {
	t         *testing.T
	fe        *fsmtest.Env
	namespace string
	direct    client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fe := fsmtest.New(t)
	return &env{t: t, fe: fe, namespace: fe.Namespace, direct: fe.Client}
}

// gadget creates gadget "g" in the test's namespace: an object for
// events to be about.
func (e *env) gadget() *v1alpha1.Gadget {
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	e.fe.Create(g)
	return g
}

// apiEvents lists the events that the API server holds about gadget "g",
// oldest first.
func (e *env) apiEvents() []eventsv1.Event {
	e.t.Helper()
	var list eventsv1.EventList
	about := client.MatchingFields{"regarding.kind": "Gadget", "regarding.name": "g"}
	if err := e.direct.List(e.t.Context(), &list, client.InNamespace(e.namespace), about); err != nil {
		e.t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return list.Items
}

// await polls cond until it holds, for at most 30 s.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	holds := func(context.Context) (bool, error) { return cond(), nil }
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, holds); err != nil {
		t.Fatalf("waited 30 s for %s", what)
	}
}
