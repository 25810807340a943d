package fsm

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kfsm/kfsm/fsm/internal/migrate"
	"github.com/kfsm/kfsm/graph"
)

// Migration is a change of the graph that moves the objects in the
// states it names, declared with [Machine.Version].
type Migration struct {
	step migrate.Step
	pick func(Object) State
}

// Rename says that state from is now named to.
func Rename(from, to State) Migration {
	return Migration{step: migrate.Step{Kind: migrate.Rename, From: []string{string(from)}, To: string(to)}}
}

// Merge says that the states from are now the one state into.
func Merge(into State, from ...State) Migration {
	step := migrate.Step{Kind: migrate.Merge, To: string(into)}
	for _, s := range from {
		step.From = append(step.From, string(s))
	}
	return Migration{step: step}
}

// Remove says that state is gone, and that its objects move to to.
func Remove(state, to State) Migration {
	return Migration{step: migrate.Step{Kind: migrate.Remove, From: []string{string(state)}, To: string(to)}}
}

// Split says that state from is now several states, and pick says which
// one of them an object in from is in. pick must give the same answer for
// the same object, as it runs again if the migration's write fails.
func Split[T Object](from State, pick func(T) State) Migration {
	return Migration{step: migrate.Step{Kind: migrate.Split, From: []string{string(from)}},
		pick: func(o Object) State { return pick(o.(T)) }}
}

// Version declares that the machine's graph is at version n, at least 2,
// made from version n-1 by migrations; call it once per version, so that
// an object of any older version finds its way. The highest version is
// the machine's.
//
// kfsm records the version in every object's status.graphVersion. An
// object of an older version (one without is version 1) is migrated when
// kfsm next reads it: its state, the states its children and actions are
// recorded under, and in a pipeline the conditions named after states,
// in the walk's one status write; the history marks the move Migrated.
// A process of an older version leaves an object of a newer one alone,
// and says so once: during a rolling update, the old operator never
// moves an object that the new one migrated.
func (m *Machine[T]) Version(n int, migrations ...Migration) *Machine[T] {
	if m.versions == nil {
		m.versions = map[int][]Migration{}
	}
	m.versions[n] = append(m.versions[n], migrations...)
	return m
}

// plan is the machine's versions, and its splits' picks by index.
func (m *Machine[T]) plan() (*migrate.Plan, []func(Object) State, []graph.Problem) {
	if m.versions == nil {
		return nil, nil, nil
	}
	steps := map[int][]migrate.Step{}
	var picks []func(Object) State
	for v, migrations := range m.versions {
		for _, mg := range migrations {
			if mg.pick != nil {
				mg.step.Pick = len(picks)
				picks = append(picks, mg.pick)
			}
			steps[v] = append(steps[v], mg.step)
		}
	}
	p, details := migrate.New(steps, func(s string) bool { return m.declares(State(s)) })
	var problems []graph.Problem
	for _, d := range details {
		problems = append(problems, graph.Problem{Code: BadMigration, Detail: d})
	}
	return p, picks, problems
}

// Stranded returns the states of an earlier graph of the machine, at its
// Version, that it no longer declares and that no migration since moves:
// their objects would stall as UnknownState. graph.Lock asks it.
func (m *Machine[T]) Stranded(earlier *graph.Graph) []graph.State {
	p, _, _ := m.plan()
	var stranded []graph.State
	for _, s := range earlier.States {
		if !m.declares(State(s.Name)) && (p == nil || !p.Moves(max(earlier.Version, 1), string(s.Name))) {
			stranded = append(stranded, s.Name)
		}
	}
	return stranded
}

func (m *Machine[T]) declares(s State) bool {
	return slices.ContainsFunc(m.states, func(d *stateDef[T]) bool { return d.name == s })
}

// migrate brings an object of an older version of the graph to the
// current one.
func (w *walker[T]) migrate() {
	b, st := w.r.b, w.st
	from := max(int(st.GraphVersion), 1)
	if from >= b.plan.Current {
		return
	}
	to := func(s State) State {
		return State(b.plan.Map(from, string(s), func(i int) string { return string(b.picks[i](w.obj)) }))
	}
	if next := to(st.State); next != st.State {
		// The object stays where it was, under another name: its time in
		// the state, its failures and its backoff go on.
		since, failures, retryAt := st.StateSince.DeepCopy(), st.Failures, st.RetryAt
		w.move(next, ReasonMigrated)
		st.StateSince, st.Failures, st.RetryAt = since, failures, retryAt
	}
	for i := range st.Outputs {
		st.Outputs[i].State = to(st.Outputs[i].State)
	}
	for i := range st.Actions {
		st.Actions[i].State = to(st.Actions[i].State)
	}
	if w.r.m.mode == Pipeline {
		for i := range st.Conditions {
			st.Conditions[i].Type = string(to(State(st.Conditions[i].Type)))
		}
	}
}

// newer reports whether obj was last written by a newer version of the
// machine's graph, which this process leaves alone; it says so once per
// object and generation.
func (r *reconciler[T]) newer(ctx context.Context, obj T) bool {
	if int(obj.FSMStatus().GraphVersion) <= r.b.plan.Version() {
		return false
	}
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	r.mu.Lock()
	told := r.newerTold[key] == obj.GetGeneration()
	r.newerTold[key] = obj.GetGeneration()
	r.mu.Unlock()
	if !told {
		msg := fmt.Sprintf("graph version %d of machine %s wrote the object; this operator runs version %d and leaves it to a newer one", obj.FSMStatus().GraphVersion, r.m.name, r.b.plan.Version())
		logf.FromContext(ctx).Info(msg, "machine", r.m.name, "object", key.String())
		r.event(obj, nil, corev1.EventTypeWarning, ReasonNewerVersion, "Leave", msg)
		r.b.metrics.LeftNewer()
	}
	return true
}
