package database_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/examples/database"
	"github.com/kfsm/kfsm/examples/database/agent"
	"github.com/kfsm/kfsm/examples/database/v1alpha1"
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

// env is one test's world: a namespace, the database agent, a CloudEvents
// receiver, and the operator.
type env struct {
	t        *testing.T
	c        client.Client
	ns       string
	agent    *agent.Agent
	received *receiver
}

// receiver keeps the transition events it is sent, in order.
type receiver struct {
	mu     sync.Mutex
	events []database.Transition
}

func (r *receiver) all() []database.Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]database.Transition(nil), r.events...)
}

func start(t *testing.T) *env {
	t.Helper()
	c, err := client.New(testCluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, c, "database")
	a, err := agent.Start("127.0.0.1:0", agent.Timings{Start: 200 * time.Millisecond, Stop: 100 * time.Millisecond, Backup: time.Second, Configure: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })

	// A CloudEvents receiver on loopback, as the operator's sink.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := cloudevents.NewHTTP(cehttp.WithListener(l))
	if err != nil {
		t.Fatal(err)
	}
	sink, err := cloudevents.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	recv := &receiver{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		_ = sink.StartReceiver(ctx, func(e cloudevents.Event) {
			var tr database.Transition
			if e.Type() == database.EventType && e.DataAs(&tr) == nil {
				recv.mu.Lock()
				recv.events = append(recv.events, tr)
				recv.mu.Unlock()
			}
		})
	}()

	events, err := cloudevents.NewClientHTTP()
	if err != nil {
		t.Fatal(err)
	}
	op := &database.Operator{Agent: &agent.Client{URL: a.URL()}, Sink: "http://" + l.Addr().String(), Events: events}
	testenv.StartManager(t, testCluster.Config, scheme, ns, op.Machine().SetupWithManager)
	return &env{t: t, c: c, ns: ns, agent: a, received: recv}
}

func (e *env) db() *v1alpha1.Database {
	e.t.Helper()
	var d v1alpha1.Database
	if err := e.c.Get(e.t.Context(), client.ObjectKey{Namespace: e.ns, Name: "orders"}, &d); err != nil {
		e.t.Fatal(err)
	}
	return &d
}

func (e *env) change(f func(*v1alpha1.DatabaseSpec)) {
	e.t.Helper()
	d := e.db()
	f(&d.Spec)
	if err := e.c.Update(e.t.Context(), d); err != nil {
		e.t.Fatal(err)
	}
}

// actual is the database's state as its agent knows it.
func (e *env) actual() agent.Database {
	d, _ := e.agent.Database(e.ns + ".orders")
	return d
}

// at waits until the database rests Ready in state, with the agent in
// actual, for the latest spec.
func (e *env) at(state fsm.State, actual string) {
	e.t.Helper()
	testenv.Poll(e.t, fmt.Sprintf("%s with the database %s", state, actual), func() bool {
		d := e.db()
		c := meta.FindStatusCondition(d.Status.Conditions, fsm.ConditionReady)
		return d.Status.State == state && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == d.Generation &&
			d.Status.Current == actual && e.actual().State == actual
	})
}

// path is the states the database went through, from its history.
func path(d *v1alpha1.Database) []fsm.State {
	var out []fsm.State
	for _, tr := range d.Status.History {
		out = append(out, tr.To)
	}
	return out
}

func TestDatabaseWalksToWhatTheSpecAsks(t *testing.T) {
	e := start(t)
	d := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: e.ns}, Spec: v1alpha1.DatabaseSpec{DesiredState: "Running"}}
	if err := e.c.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	e.at(database.Running, agent.Running)

	// A backup is maintenance: the database goes Servicing, the backup runs
	// as an action, and it comes back Running.
	e.change(func(s *v1alpha1.DatabaseSpec) { s.Backup = "nightly-1" })
	testenv.Poll(t, "the backup", func() bool { return e.db().Status.LastBackup == "nightly-1" })
	e.at(database.Running, agent.Running)
	if got := e.actual().Backups; !cmp.Equal(got, []string{"nightly-1"}) {
		t.Errorf("the agent took backups %v, want nightly-1", got)
	}

	// Asked to service, it stays in maintenance; a configuration change
	// is applied there.
	e.change(func(s *v1alpha1.DatabaseSpec) {
		s.DesiredState = "Servicing"
		s.Config = map[string]string{"max_connections": "200"}
	})
	e.at(database.Servicing, agent.Servicing)
	testenv.Poll(t, "the configuration", func() bool { return e.actual().Config["max_connections"] == "200" })
	if got := e.db().Status.Desired; got != database.Servicing {
		t.Errorf("status.desired = %s, want Servicing", got)
	}

	// Asked to stop from maintenance: Servicing → End.
	e.change(func(s *v1alpha1.DatabaseSpec) { s.DesiredState = "Stopped" })
	e.at(database.End, agent.Stopped)

	want := []fsm.State{database.Start, database.Running, database.Servicing, database.Running, database.Servicing, database.End}
	if diff := cmp.Diff(want, path(e.db())); diff != "" {
		t.Errorf("the path traversed (-want +got):\n%s", diff)
	}

	// Running again is not reachable from End: Stalled, with the reason.
	e.change(func(s *v1alpha1.DatabaseSpec) { s.DesiredState = "Running" })
	testenv.Poll(t, "the unreachable goal to stall", func() bool {
		c := meta.FindStatusCondition(e.db().Status.Conditions, fsm.ConditionStalled)
		return c != nil && c.Reason == fsm.ReasonGoalUnreachable && strings.Contains(c.Message, "no path leads from state End to goal Running")
	})

	// One CloudEvent per transition, in order, naming the object and the
	// states.
	var got []string
	for _, tr := range e.received.all() {
		if tr.Object != e.ns+"/orders" {
			t.Errorf("an event names object %q", tr.Object)
		}
		got = append(got, string(tr.From)+"→"+string(tr.To))
	}
	wantEvents := []string{"→Start", "Start→Running", "Running→Servicing", "Servicing→Running", "Running→Servicing", "Servicing→End"}
	if diff := cmp.Diff(wantEvents, got); diff != "" {
		t.Errorf("CloudEvents received (-want +got):\n%s", diff)
	}
}

func TestStopTakesTheDefaultChildAndMaintenanceComesFirst(t *testing.T) {
	e := start(t)
	d := &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: e.ns}, Spec: v1alpha1.DatabaseSpec{DesiredState: "Stopped"}}
	if err := e.c.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	// Stop alone: Running raises the Default event, which is Stopping.
	e.at(database.End, agent.Stopped)
	if diff := cmp.Diff([]fsm.State{database.Start, database.Running, database.Stopping, database.End}, path(e.db())); diff != "" {
		t.Errorf("path (-want +got):\n%s", diff)
	}

	// Stop with a backup due: both are raised, Servicing wins, and the
	// backup is taken before the database stops.
	if err := e.c.Delete(t.Context(), e.db()); err != nil {
		t.Fatal(err)
	}
	testenv.Poll(t, "the first database to go", func() bool {
		return apierrors.IsNotFound(e.c.Get(t.Context(), client.ObjectKey{Namespace: e.ns, Name: "orders"}, &v1alpha1.Database{}))
	})
	if _, known := e.agent.Database(e.ns + ".orders"); known {
		t.Error("the agent still knows the deleted database")
	}
	d = &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: e.ns}, Spec: v1alpha1.DatabaseSpec{DesiredState: "Stopped", Backup: "final"}}
	if err := e.c.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	e.at(database.End, agent.Stopped)
	if diff := cmp.Diff([]fsm.State{database.Start, database.Running, database.Servicing, database.End}, path(e.db())); diff != "" {
		t.Errorf("path (-want +got):\n%s", diff)
	}
	if got := e.actual().Backups; !cmp.Equal(got, []string{"final"}) {
		t.Errorf("backups %v, want the final one taken before the stop", got)
	}
}

func TestReadmeDiagramIsCurrent(t *testing.T) {
	testenv.ReadmeHasDiagram(t, (&database.Operator{}).Machine().Graph().Mermaid())
}
