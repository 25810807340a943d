// Package database drives an application through its lifecycle towards
// the state its spec asks for, as OKT's state machine does: the desired
// state is in the spec, the actual state comes from the database's agent
// on every reconcile, maintenance (backups, configuration changes) runs
// as asynchronous actions, and every transition is sent as a CloudEvent
// with package cesink.
//
// The graph is OKT's: Start → Running; Running → Servicing | Stopping,
// where Servicing has priority and Stopping is the default child;
// Servicing → Running | End; Stopping → End.
package database

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/kfsm/kfsm/cesink"
	"github.com/kfsm/kfsm/examples/database/agent"
	"github.com/kfsm/kfsm/examples/database/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
)

// The states of a database.
const (
	Start     fsm.State = "Start"
	Running   fsm.State = "Running"
	Servicing fsm.State = "Servicing"
	Stopping  fsm.State = "Stopping"
	End       fsm.State = "End"
	Removed   fsm.State = "Removed"
)

// Operator holds what the handlers talk to.
type Operator struct {
	Agent *agent.Client
	// Events sends a CloudEvent per transition, with cesink, where it was
	// made to send; nil sends none.
	Events cloudevents.Client
}

// Machine returns the database machine.
func (o *Operator) Machine() *fsm.Machine[*v1alpha1.Database] {
	m := fsm.New[*v1alpha1.Database]("database", fsm.Lifecycle).
		Initial(Start).
		State(Start, o.start, fsm.To(Running)).
		State(Running, o.running, fsm.To(Servicing, Stopping)).
		State(Servicing, o.servicing, fsm.To(Running, End)).
		State(Stopping, o.stopping, fsm.To(End)).
		State(End, o.end, fsm.Final()).
		OnDelete(Removed).
		State(Removed, o.remove, fsm.Final()).
		Goal(Goal)
	if o.Events != nil {
		m.Observe(cesink.New(m, o.Events))
	}
	return m
}

// Goal is the machine state that a database's desired state names.
func Goal(db *v1alpha1.Database) fsm.State {
	switch db.Spec.DesiredState {
	case "", "Running":
		return Running
	case "Stopped":
		return End
	}
	return fsm.State(db.Spec.DesiredState)
}

type request = fsm.Request[*v1alpha1.Database]

// agentName names the database at the agent: namespace.name.
func agentName(db *v1alpha1.Database) string { return db.Namespace + "." + db.Name }

// observe reads the database's actual state from its agent, as OKT does on
// every reconcile, and shows it next to the desired one.
func (o *Operator) observe(ctx context.Context, r *request) (string, error) {
	st := &r.Object.Status
	st.Desired = r.Goal
	db, err := o.Agent.Get(ctx, agentName(r.Object))
	switch {
	case errors.Is(err, agent.ErrUnknown):
		st.Current = agent.Stopped
	case err != nil:
		return "", err
	default:
		st.Current = db.State
	}
	return st.Current, nil
}

// resumeOrStart is how the agent brings a database in state current to
// running.
func resumeOrStart(current string) string {
	if current == agent.Servicing {
		return "resume"
	}
	return "start"
}

// to asks the agent to move the database to state want with op, unless
// it is there.
func (o *Operator) to(ctx context.Context, r *request, current, want, op string) error {
	if current == want {
		return nil
	}
	if err := o.Agent.Do(ctx, agentName(r.Object), op); err != nil {
		return err
	}
	r.Object.Status.Current = want
	return nil
}

func (o *Operator) start(ctx context.Context, r *request) fsm.Result {
	current, err := o.observe(ctx, r)
	if err != nil {
		return fsm.Fail(err)
	}
	// A walk whose status write was lost may have taken the database on,
	// into maintenance.
	if err := o.to(ctx, r, current, agent.Running, resumeOrStart(current)); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(Running)
}

// running keeps the database running and raises what it sees: maintenance
// due or asked for, and a stop asked for. When both are raised, Servicing
// wins, as the exit declared first; a stop alone takes the default child,
// Stopping.
func (o *Operator) running(ctx context.Context, r *request) fsm.Result {
	current, err := o.observe(ctx, r)
	if err != nil {
		return fsm.Fail(err)
	}
	if err := o.to(ctx, r, current, agent.Running, resumeOrStart(current)); err != nil {
		return fsm.Fail(err)
	}
	var events []fsm.State
	if maintenanceDue(r.Object) || r.Goal == Servicing {
		events = append(events, Servicing)
	}
	if r.Goal == End {
		events = append(events, fsm.Default)
	}
	if len(events) == 0 {
		return fsm.Done()
	}
	return fsm.Next(events[0], events[1:]...)
}

func maintenanceDue(db *v1alpha1.Database) bool {
	return (db.Spec.Backup != "" && db.Spec.Backup != db.Status.LastBackup) ||
		!maps.Equal(db.Spec.Config, db.Status.AppliedConfig)
}

// servicing puts the database in maintenance, runs the backup and the
// configuration change as asynchronous actions, and then walks on towards
// the goal, or stays when the goal is maintenance.
func (o *Operator) servicing(ctx context.Context, r *request) fsm.Result {
	current, err := o.observe(ctx, r)
	if err != nil {
		return fsm.Fail(err)
	}
	if current == agent.Stopped {
		// End stopped it in a walk whose record was lost (a failed
		// status write), or someone else did. That walk may have applied
		// the configuration too: what the agent holds is applied.
		if r.NextHop == End {
			if db, err := o.Agent.Get(ctx, agentName(r.Object)); err == nil && len(db.Config) > 0 && maps.Equal(db.Config, r.Object.Spec.Config) {
				r.Object.Status.AppliedConfig = maps.Clone(db.Config)
			}
			return fsm.Next(End)
		}
		if err := o.to(ctx, r, current, agent.Running, "start"); err != nil {
			return fsm.Fail(err)
		}
		current = agent.Running
	}
	if err := o.to(ctx, r, current, agent.Servicing, "service"); err != nil {
		return fsm.Fail(err)
	}
	db, st, name := r.Object, &r.Object.Status, agentName(r.Object)
	if id := db.Spec.Backup; id != "" && id != st.LastBackup {
		a := r.Action("backup-"+id, func(ctx context.Context, _ *fsm.ActionRun) error { return o.Agent.Backup(ctx, name, id) },
			// A backup taken twice is two backups: after a lost run, the
			// agent's list of backups tells whether it was taken.
			fsm.Observe(func(ctx context.Context, _ *fsm.ActionRun) (bool, error) {
				got, err := o.Agent.Get(ctx, name)
				return err == nil && slices.Contains(got.Backups, id), err
			}),
			fsm.ActionKind("backup")) // the metrics of every backup in one series
		switch a.State {
		case fsm.ActionPending:
			return fsm.Wait(0, "BackingUp")
		case fsm.ActionFailed:
			return fsm.Fail(fmt.Errorf("backup %s: %w", id, a.Err))
		}
		st.LastBackup = id
		r.Event("Normal", "BackedUp", fmt.Sprintf("backup %s taken", id))
	}
	if config := maps.Clone(db.Spec.Config); !maps.Equal(config, st.AppliedConfig) {
		a := r.Action("configure", func(ctx context.Context, _ *fsm.ActionRun) error { return o.Agent.Configure(ctx, name, config) },
			fsm.Idempotent()) // the same configuration, set again
		switch a.State {
		case fsm.ActionPending:
			return fsm.Wait(0, "Configuring")
		case fsm.ActionFailed:
			return fsm.Fail(fmt.Errorf("configuration: %w", a.Err))
		}
		st.AppliedConfig = config
	}
	switch r.NextHop {
	case Running:
		if err := o.to(ctx, r, st.Current, agent.Running, "resume"); err != nil {
			return fsm.Fail(err)
		}
		return fsm.Next(Running)
	case End:
		return fsm.Next(End)
	}
	return fsm.Done() // in maintenance, as asked
}

func (o *Operator) stopping(ctx context.Context, r *request) fsm.Result {
	current, err := o.observe(ctx, r)
	if err != nil {
		return fsm.Fail(err)
	}
	if err := o.to(ctx, r, current, agent.Stopped, "stop"); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(End)
}

// end keeps the database stopped.
func (o *Operator) end(ctx context.Context, r *request) fsm.Result {
	current, err := o.observe(ctx, r)
	if err != nil {
		return fsm.Fail(err)
	}
	if err := o.to(ctx, r, current, agent.Stopped, "stop"); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Done()
}

// remove stops the database and has the agent forget it.
func (o *Operator) remove(ctx context.Context, r *request) fsm.Result {
	name := agentName(r.Object)
	switch _, err := o.Agent.Get(ctx, name); {
	case errors.Is(err, agent.ErrUnknown):
		return fsm.Done() // never started, or already forgotten
	case err != nil:
		return fsm.Fail(err)
	}
	if err := o.Agent.Do(ctx, name, "stop"); err != nil {
		return fsm.Fail(err)
	}
	if err := o.Agent.Forget(ctx, name); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Done()
}
