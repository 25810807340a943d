package database_test

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/cesink"
	"github.com/kfsm/kfsm/examples/database"
	"github.com/kfsm/kfsm/examples/database/agent"
	"github.com/kfsm/kfsm/examples/database/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/doccheck"
)

func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDs:        []fs.FS{database.CRDs},
		Roles:       []fs.FS{database.Role},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		MinCoverage: 100,
	})
}

func TestDatabaseWalksToWhatTheSpecAsks(t *testing.T) {
	e := fsmtest.New(t)
	a := startAgent(t)
	received, sink := receiveEvents(t)
	events, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(sink))
	if err != nil {
		t.Fatal(err)
	}
	fsmtest.Run(e, (&database.Operator{Agent: &agent.Client{URL: a.URL()}, Events: events}).Machine())

	d := named("orders", "Running")
	e.Create(d)
	at(e, a, d, database.Running, agent.Running)

	// A backup is maintenance: the database goes Servicing, the backup runs
	// as an action, and it comes back Running.
	e.Update(d, func() { d.Spec.Backup = "nightly-1" })
	at(e, a, d, database.Running, agent.Running)
	if got := d.Status.LastBackup; got != "nightly-1" {
		t.Errorf("status.lastBackup = %q, want nightly-1", got)
	}
	if got := actual(e, a, d).Backups; !cmp.Equal(got, []string{"nightly-1"}) {
		t.Errorf("the agent took backups %v, want nightly-1", got)
	}

	// Asked to service, it stays in maintenance; a configuration change
	// is applied there.
	config := map[string]string{"max_connections": "200"}
	e.Update(d, func() {
		d.Spec.DesiredState = "Servicing"
		d.Spec.Config = config
	})
	at(e, a, d, database.Servicing, agent.Servicing)
	if got := actual(e, a, d).Config; !maps.Equal(got, config) {
		t.Errorf("the agent runs with configuration %v, want %v", got, config)
	}
	if got := d.Status.Desired; got != database.Servicing {
		t.Errorf("status.desired = %s, want Servicing", got)
	}

	// Asked to stop from maintenance: Servicing → End.
	e.Update(d, func() { d.Spec.DesiredState = "Stopped" })
	at(e, a, d, database.End, agent.Stopped)

	want := []fsm.State{database.Start, database.Running, database.Servicing, database.Running, database.Servicing, database.End}
	if diff := cmp.Diff(want, path(d)); diff != "" {
		t.Errorf("the path traversed, in status.history (-want +got):\n%s", diff)
	}

	// Running again is not reachable from End: Stalled, with the reason.
	e.Update(d, func() { d.Spec.DesiredState = "Running" })
	e.AwaitCondition(d, fsm.ConditionStalled, metav1.ConditionTrue)
	if c := meta.FindStatusCondition(d.Status.Conditions, fsm.ConditionStalled); c.Reason != fsm.ReasonGoalUnreachable || !strings.Contains(c.Message, "no path leads from state End to goal Running") {
		t.Errorf("Stalled for %s: %q, want %s saying that no path leads from End to Running", c.Reason, c.Message, fsm.ReasonGoalUnreachable)
	}

	// One CloudEvent per transition, in order, naming the machine, the
	// object and the states, each with an id of its own.
	var got []string
	ids := map[string]bool{}
	wantObject := cesink.ObjectRef{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "Database",
		Namespace: e.Namespace, Name: "orders", UID: d.UID}
	for _, ev := range received.all() {
		var data cesink.Data
		if err := ev.DataAs(&data); err != nil {
			t.Errorf("event %s: %v", ev.ID(), err)
		}
		if ev.Source() != "kfsm/database" || ev.Subject() != e.Namespace+"/orders" || data.Machine != "database" {
			t.Errorf("event %s has source %q, subject %q and machine %q, want kfsm/database, %s/orders and database", ev.ID(), ev.Source(), ev.Subject(), data.Machine, e.Namespace)
		}
		if diff := cmp.Diff(wantObject, data.Object); diff != "" {
			t.Errorf("event %s names the object (-want +got):\n%s", ev.ID(), diff)
		}
		if ids[ev.ID()] {
			t.Errorf("event id %s is given twice", ev.ID())
		}
		ids[ev.ID()] = true
		got = append(got, string(data.From)+"→"+string(data.To))
	}
	wantEvents := []string{"→Start", "Start→Running", "Running→Servicing", "Servicing→Running", "Running→Servicing", "Servicing→End"}
	if diff := cmp.Diff(wantEvents, got); diff != "" {
		t.Errorf("CloudEvents received (-want +got):\n%s", diff)
	}
}

func TestStopTakesTheDefaultChildAndMaintenanceComesFirst(t *testing.T) {
	e := fsmtest.New(t)
	a := startAgent(t)
	fsmtest.Run(e, (&database.Operator{Agent: &agent.Client{URL: a.URL()}}).Machine())

	// Stop alone: Running raises the Default event, which is Stopping.
	d := named("orders", "Stopped")
	e.Create(d)
	at(e, a, d, database.End, agent.Stopped)
	if diff := cmp.Diff([]string{"Start→Running", "Running→Stopping", "Stopping→End"}, e.Transitions(d)); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}

	// Deleted, it is stopped and forgotten.
	e.Delete(d)
	e.AwaitGone(d)
	if got := e.Transitions(d); got[len(got)-1] != "delete→Removed" {
		t.Errorf("transitions end with %q, want the deletion entry", got[len(got)-1])
	}
	if _, known := a.Database(e.Namespace + ".orders"); known {
		t.Error("the agent still knows the deleted database")
	}

	// Stop with a backup due: both are raised, Servicing wins, and the
	// backup is taken before the database stops.
	d = named("archive", "Stopped")
	d.Spec.Backup = "final"
	e.Create(d)
	at(e, a, d, database.End, agent.Stopped)
	if diff := cmp.Diff([]string{"Start→Running", "Running→Servicing", "Servicing→End"}, e.Transitions(d)); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	if got := actual(e, a, d).Backups; !cmp.Equal(got, []string{"final"}) {
		t.Errorf("backups %v, want the final one taken before the stop", got)
	}
}

// The main scenario under every combination of faults that fsmtest
// explores (two at a time with -kfsm.depth=2, as make explore runs it):
// the database reaches the same status, and the agent the same state, as
// in a clean run.
func TestDatabaseSurvivesFaults(t *testing.T) {
	machine, scenario, opts := underFaults(t)
	fsmtest.Explore(t, machine, scenario, opts...)
}

// underFaults is the machine, the main scenario and the options of the
// fault tests: TestDatabaseSurvivesFaults's, and the seeded-bug check's.
// The backups that the agent took are effects, counted in every run.
func underFaults(t *testing.T) (func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Database], func(*fsmtest.Env), []fsmtest.FaultOption) {
	// One agent serves every run: it names databases namespace.name, so
	// the runs, each in a namespace of its own, do not meet there. It
	// outlives the operator's crashes, as the real one would.
	a := startAgent(t)
	machine := func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Database] {
		return (&database.Operator{Agent: outside(e, a)}).Machine()
	}
	scenario := func(e *fsmtest.Env) {
		d := named("orders", "Running")
		e.Create(d)
		at(e, a, d, database.Running, agent.Running)
		e.Update(d, func() { d.Spec.Backup = "nightly-1" })
		at(e, a, d, database.Running, agent.Running)
		e.Update(d, func() {
			d.Spec.DesiredState = "Servicing"
			d.Spec.Config = map[string]string{"max_connections": "200"}
		})
		at(e, a, d, database.Servicing, agent.Servicing)
		e.Update(d, func() { d.Spec.DesiredState = "Stopped" })
		at(e, a, d, database.End, agent.Stopped)
		e.Await("the agent to hold one backup and the configuration", func() bool {
			db := actual(e, a, d)
			return cmp.Equal(db.Backups, []string{"nightly-1"}) && db.Config["max_connections"] == "200"
		})
		e.Delete(d)
		e.AwaitGone(d)
		e.Await("the agent to forget the database", func() bool {
			_, known := a.Database(e.Namespace + "." + d.Name)
			return !known
		})
	}
	backups := fsmtest.Effects(func(e *fsmtest.Env) map[string]int {
		return map[string]int{"backups": a.BackupsTaken(e.Namespace + ".")}
	})
	return machine, scenario, []fsmtest.FaultOption{backups}
}

func TestReadmeDiagramIsCurrent(t *testing.T) {
	doccheck.ReadmeHasDiagram(t, (&database.Operator{}).Machine().Graph().Mermaid())
}

// outside is the operator's client of agent a in a run of the fault
// tests, each request made through the agent declared as a system
// outside the cluster: a fault may fail it before it reaches the agent,
// or lose its answer, or time it out, after the agent took it. And the
// agent drifts as a real one does: someone stops the run's databases by
// hand.
func outside(e *fsmtest.Env, a *agent.Agent) *agent.Client {
	system := e.Outside("agent")
	system.Drift("stopped", func() {
		c := &agent.Client{URL: a.URL()}
		for _, name := range a.Names(e.Namespace + ".") {
			if err := c.Do(context.Background(), name, "stop"); err != nil {
				e.T.Errorf("stopping %s behind the operator: %v", name, err)
			}
		}
	})
	return &agent.Client{URL: a.URL(), HTTP: &http.Client{Transport: system.Transport(nil), Timeout: time.Minute}}
}

// named is a database that asks for desired.
func named(name, desired string) *v1alpha1.Database {
	return &v1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.DatabaseSpec{DesiredState: desired}}
}

// at awaits d at rest in state, Ready for its spec, with the agent saying
// actual; d is read.
func at(e *fsmtest.Env, a *agent.Agent, d *v1alpha1.Database, state fsm.State, actualState string) {
	e.T.Helper()
	e.AwaitReady(d)
	e.Await(fmt.Sprintf("%s in state %s with the database %s", d.Name, state, actualState), func() bool {
		return e.State(d) == state && d.Status.Current == actualState && actual(e, a, d).State == actualState
	})
}

// actual is what the agent knows of d.
func actual(e *fsmtest.Env, a *agent.Agent, d *v1alpha1.Database) agent.Database {
	db, _ := a.Database(e.Namespace + "." + d.Name)
	return db
}

// path is the states the database went through, from its history.
func path(d *v1alpha1.Database) []fsm.State {
	var out []fsm.State
	for _, tr := range d.Status.History {
		out = append(out, tr.To)
	}
	return out
}

// startAgent serves a database agent on loopback until the test ends.
func startAgent(t testing.TB) *agent.Agent {
	t.Helper()
	a, err := agent.Start("127.0.0.1:0", agent.Timings{Start: 200 * time.Millisecond, Stop: 100 * time.Millisecond, Backup: time.Second, Configure: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// receiver keeps the transition events it is sent, in order.
type receiver struct {
	mu     sync.Mutex
	events []cloudevents.Event
}

func (r *receiver) all() []cloudevents.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cloudevents.Event(nil), r.events...)
}

// receiveEvents serves a CloudEvents receiver on loopback until the test
// ends, and returns it and its URL, the operator's sink.
func receiveEvents(t testing.TB) (*receiver, string) {
	t.Helper()
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
		_ = sink.StartReceiver(ctx, func(ev cloudevents.Event) {
			if ev.Type() == cesink.Type {
				recv.mu.Lock()
				recv.events = append(recv.events, ev)
				recv.mu.Unlock()
			}
		})
	}()
	return recv, "http://" + l.Addr().String()
}
