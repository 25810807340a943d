package fsm_test

// Each guarantee of the package doc is checked, besides one reconcile at
// a time, the way operators run kfsm: under a real manager, against a
// real API server, where every write kfsm makes comes back as a watch
// event. Those tests are named TestUnderManager; they count handler runs,
// writes, events, log lines and metrics over time, not only end states.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// One API server serves every test of the package; each test works in a
// namespace of its own. The workloads tier brings the garbage collector,
// which deletes the children of deleted parents.
func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard()) // tests that read logs attach their own
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:    []string{filepath.Join("..", "internal", "testapi", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		Workloads:   true,
		// The sharded machines' caches list and watch with a shard
		// selector, an alpha feature of Kubernetes 1.36.
		FeatureGates: map[string]bool{"ShardedListAndWatch": true},
	})
}

// env is a test's view of the shared cluster: fsmtest's namespace, and
// for the tests that call a machine's Reconciler themselves, a client that
// counts writes and a recorder that keeps events.
type env struct {
	t         *testing.T
	fe        *fsmtest.Env // Await works once fsmtest.Run has started an operator
	namespace string
	client    client.Client // counts writes
	direct    client.Client // does not
	writes    atomic.Int64
	events    *eventLog
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fe := fsmtest.New(t)
	e := &env{t: t, fe: fe, namespace: fe.Namespace, direct: fe.Client, events: &eventLog{}}
	e.client = interceptor.NewClient(fe.Client, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			e.writes.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			e.writes.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			e.writes.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			e.writes.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			e.writes.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			e.writes.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	return e
}

// gadget creates a gadget in the test's namespace.
func (e *env) gadget(name string, spec v1alpha1.GadgetSpec) *v1alpha1.Gadget {
	e.t.Helper()
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.namespace}, Spec: spec}
	if err := e.direct.Create(e.t.Context(), g); err != nil {
		e.t.Fatal(err)
	}
	return g
}

// get reads a gadget from the API server.
func (e *env) get(name string) *v1alpha1.Gadget {
	e.t.Helper()
	var g v1alpha1.Gadget
	if err := e.direct.Get(e.t.Context(), client.ObjectKey{Namespace: e.namespace, Name: name}, &g); err != nil {
		e.t.Fatal(err)
	}
	return &g
}

// update changes the spec of gadget "g", the one most tests use, in the
// API server.
func (e *env) update(change func(*v1alpha1.GadgetSpec)) {
	e.t.Helper()
	g := e.get("g")
	change(&g.Spec)
	if err := e.direct.Update(e.t.Context(), g); err != nil {
		e.t.Fatal(err)
	}
}

// reconciler builds m's reconciler on the counting client.
func (e *env) reconciler(m *fsm.Machine[*v1alpha1.Gadget]) reconcile.Reconciler {
	e.t.Helper()
	r, err := m.Reconciler(e.client, e.events)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// reconcile runs one reconcile of the named gadget, which must not fail.
func (e *env) reconcile(r reconcile.Reconciler, name string) reconcile.Result {
	e.t.Helper()
	res, err := r.Reconcile(e.t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: e.namespace, Name: name}})
	if err != nil {
		e.t.Fatalf("Reconcile() = %v", err)
	}
	return res
}

// fail runs one reconcile of gadget "g", in which a handler must fail,
// and returns the failure. It is terminal (RetryAfter zero, wrapped in
// reconcile.TerminalError) when the state's retries are exhausted.
func (e *env) fail(r reconcile.Reconciler) *fsm.HandlerError {
	e.t.Helper()
	_, err := r.Reconcile(e.t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: e.namespace, Name: "g"}})
	var f *fsm.HandlerError
	if !errors.As(err, &f) {
		e.t.Fatalf("Reconcile() = %v, want a handler's failure", err)
	}
	if terminal := errors.Is(err, reconcile.TerminalError(nil)); terminal != (f.RetryAfter == 0) {
		e.t.Errorf("Reconcile() = %v: terminal %v, but RetryAfter %v", err, terminal, f.RetryAfter)
	}
	return f
}

// eventLog is an events.EventRecorder that keeps what it is told.
type eventLog struct {
	mu     sync.Mutex
	events []recordedEvent
}

type recordedEvent struct{ Type, Reason, Note string }

var _ events.EventRecorder = (*eventLog)(nil)

func (l *eventLog) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _ string, note string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, recordedEvent{Type: eventtype, Reason: reason, Note: fmt.Sprintf(note, args...)})
}

func (l *eventLog) all() []recordedEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]recordedEvent(nil), l.events...)
}

func (l *eventLog) reasons() []string {
	var out []string
	for _, ev := range l.all() {
		out = append(out, ev.Reason)
	}
	return out
}

type (
	gadget  = v1alpha1.Gadget
	request = fsm.Request[*gadget]
)

func done(context.Context, *request) fsm.Result { return fsm.Done() }

func next(s fsm.State) fsm.Handler[*gadget] {
	return func(context.Context, *request) fsm.Result { return fsm.Next(s) }
}

func condition(g *gadget, t string) *metav1.Condition {
	return meta.FindStatusCondition(g.Status.Conditions, t)
}

// wantCondition fails unless g has condition t with the status and reason.
func wantCondition(t *testing.T, g *gadget, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := condition(g, typ)
	if c == nil {
		t.Errorf("condition %s is missing; conditions: %+v", typ, g.Status.Conditions)
		return
	}
	if c.Status != status || c.Reason != reason || c.ObservedGeneration != g.Generation {
		t.Errorf("condition %s = %s/%s (generation %d), want %s/%s (generation %d)", typ, c.Status, c.Reason, c.ObservedGeneration, status, reason, g.Generation)
	}
}

func failOr(err error, r fsm.Result) fsm.Result {
	if err != nil {
		return fsm.Fail(err)
	}
	return r
}
