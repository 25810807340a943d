package fsmtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

// driver makes the machine work until a condition holds: the manager by
// waiting, the step driver by running reconciles.
type driver interface {
	await(what string, cond func() (bool, string))
}

// Await makes the operator work until cond holds, or fails the test
// after e.Timeout naming what it waited for. Under Run it polls while
// the manager works; under Steps it runs the reconciles that are due.
func (e *Env) Await(what string, cond func() bool) {
	e.T.Helper()
	e.await(what, func() (bool, string) { return cond(), "it does not hold" })
}

func (e *Env) await(what string, cond func() (bool, string)) {
	e.T.Helper()
	if e.snap.skipping(what) {
		return
	}
	if e.driver == nil {
		e.T.Fatalf("fsmtest: awaiting %s with no operator: call Run or Steps first", what)
	}
	// In a fault-injection run, the snapshot waits until the operator is
	// quiet with the condition holding: a retry after an injected failure
	// may take it back for a while.
	e.polling.Store(true)
	defer e.polling.Store(false)
	busied := 0
	for range 10 {
		e.driver.await(what, func() (bool, string) {
			ok, why := cond()
			if !ok && e.snap.clockJumped() {
				// Enough that the operator took in the scenario's last
				// change: every object was walked since.
				return e.resynced(e.snap.trace.SinceChange()), why
			}
			return ok, why
		})
		e.catchUp()
		if e.snap == nil {
			return
		}
		busy := e.snap.quiet(e)
		if e.snap.clockJumped() {
			// The jump may have fired a timeout that the clean run never
			// reached: what the scenario awaits may never hold, and the
			// run is judged by the snapshots before the jump, by coming
			// to rest and by what it leaves.
			e.snap.ops = append(e.snap.ops, "await "+what)
			return
		}
		if busy != "" {
			// Once more: a restarted operator, under load, may take a while.
			if busied++; busied == 2 {
				e.fatalf("%s held, but the operator was still busy %s later: %s", what, 2*e.snap.quietLimit(), busy)
			}
			continue
		}
		// The snapshot is of a moment when cond held: an operator that
		// polls on its own clock may write between the two reads.
		at, still := e.api.lastWrite()
		if ok, _ := cond(); ok && still {
			var objects map[string]any
			if !e.snap.unstruck() {
				objects = e.snapshot()
			}
			if after, still := e.api.lastWrite(); still && after.Equal(at) {
				e.snap.settled(e, what, objects)
				return
			}
		}
	}
	e.fatalf("%s held, but not once the operator was quiet, ten times over", what)
}

// catchUp waits a moment, at most, until the walks that made the
// operator's writes are recorded: an Await can see a write before the
// reconcile that made it has reported its walk.
func (e *Env) catchUp() {
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if e.walksCurrent() {
			return
		}
	}
}

// walksCurrent reports whether, for every object of a machine that the
// operator wrote, a walk recorded after its latest write.
func (e *Env) walksCurrent() bool {
	e.kindsMu.Lock()
	kinds := map[apiKey]bool{}
	for _, k := range e.resources {
		kinds[k] = true
	}
	e.kindsMu.Unlock()
	latest := e.walks.latest()
	e.api.mu.Lock()
	defer e.api.mu.Unlock()
	if e.api.flights > 0 {
		return false // a write the test may have seen is not recorded yet
	}
	for k, rv := range e.api.lastRV {
		if kinds[apiKey{Group: k.Group, Resource: k.Resource}] && latest[k.Name] < rv {
			return false
		}
	}
	return true
}

// AwaitState waits until obj is in state s, and reads it into obj.
func (e *Env) AwaitState(obj fsm.Object, s fsm.State) {
	e.T.Helper()
	e.await(fmt.Sprintf("%s to be in state %s", e.describe(obj), s), func() (bool, string) {
		if !e.Get(obj) {
			return false, "it does not exist"
		}
		return obj.FSMStatus().State == s, e.where(obj)
	})
}

// AwaitCondition waits until obj has condition t with status s for its
// current generation, and reads it into obj.
func (e *Env) AwaitCondition(obj fsm.Object, t string, s metav1.ConditionStatus) {
	e.T.Helper()
	e.await(fmt.Sprintf("%s to have condition %s=%s", e.describe(obj), t, s), func() (bool, string) {
		if !e.Get(obj) {
			return false, "it does not exist"
		}
		c := meta.FindStatusCondition(obj.FSMStatus().Conditions, t)
		return c != nil && c.Status == s && c.ObservedGeneration == obj.GetGeneration(), e.where(obj)
	})
}

// AwaitReady waits until obj is Ready for its current generation and
// kstatus, as kubectl wait, Flux and Argo CD use it, says it is Current.
func (e *Env) AwaitReady(obj fsm.Object) {
	e.T.Helper()
	e.await(fmt.Sprintf("%s to be Ready", e.describe(obj)), func() (bool, string) {
		if !e.Get(obj) {
			return false, "it does not exist"
		}
		// kstatus takes an object without conditions for Current; a kfsm
		// object is Ready only once its Ready condition says so.
		c := meta.FindStatusCondition(obj.FSMStatus().Conditions, fsm.ConditionReady)
		st, msg := e.kstatus(obj)
		if c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == obj.GetGeneration() && st == status.CurrentStatus {
			return true, ""
		}
		return false, fmt.Sprintf("kstatus says %s (%s); %s", st, msg, e.where(obj))
	})
}

// AwaitGone waits until obj no longer exists: its deletion path ran and
// its finalizers are gone.
func (e *Env) AwaitGone(obj client.Object) {
	e.T.Helper()
	e.await(fmt.Sprintf("%s to be gone", e.describe(obj)), func() (bool, string) {
		if !e.Get(obj) {
			return true, ""
		}
		why := fmt.Sprintf("it still exists with finalizers %v", obj.GetFinalizers())
		if o, ok := obj.(fsm.Object); ok {
			why += "; " + e.where(o)
		}
		return false, why
	})
}

// where says where obj is, for failure messages.
func (e *Env) where(obj fsm.Object) string {
	st := obj.FSMStatus()
	var conds []string
	for _, c := range st.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("it is in state %q, generation %d observed %d, conditions [%s], transitions %v",
		st.State, obj.GetGeneration(), st.ObservedGeneration, strings.Join(conds, "; "), e.Transitions(obj))
}

// State reads obj and returns its state.
func (e *Env) State(obj fsm.Object) fsm.State {
	e.T.Helper()
	if !e.Get(obj) {
		e.T.Fatalf("fsmtest: %s does not exist", e.describe(obj))
	}
	return obj.FSMStatus().State
}

// KStatus reads obj and returns what kstatus makes of it.
func (e *Env) KStatus(obj client.Object) (status.Status, string) {
	e.T.Helper()
	e.Get(obj)
	return e.kstatus(obj)
}

// kstatus is what kstatus makes of obj as it is.
func (e *Env) kstatus(obj client.Object) (status.Status, string) {
	e.T.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		e.T.Fatal(err)
	}
	gvk := e.kindOf(obj)
	un := &unstructured.Unstructured{Object: u}
	un.SetGroupVersionKind(gvk)
	res, err := status.Compute(un)
	if err != nil {
		e.T.Fatalf("fsmtest: kstatus of %s: %v", e.describe(obj), err)
	}
	return res.Status, res.Message
}

// Transitions lists the edges that obj took and the operator recorded,
// in order, as "A→B"; timeouts and retries edges say so, "A→B (timeout)",
// the entry into the deletion path is "delete→B", and the move of a
// migration to a new graph version (fsm.Machine.Version) is
// "A→B (migrated)".
func (e *Env) Transitions(obj client.Object) []string {
	walks, _ := e.walks.of(obj, 0)
	var out []string
	for _, w := range walks {
		if w.Committed {
			out = append(out, transitionsOf(w)...)
		}
	}
	return out
}

// transitionsOf lists the moves of a walk: a migration to a new graph
// version, as "A→B (migrated)", then the edges it took.
func transitionsOf(w fsm.Walk) []string {
	var out []string
	if m := w.Migrated; m != nil {
		out = append(out, fmt.Sprintf("%s→%s (migrated)", m.From, m.To))
	}
	for _, edge := range w.Edges {
		out = append(out, edgeString(edge))
	}
	return out
}

func edgeString(e graph.EdgeKey) string {
	switch e.Kind {
	case graph.DeleteEntry:
		return "delete→" + string(e.To)
	case graph.Exit.String():
		return string(e.From) + "→" + string(e.To)
	}
	return fmt.Sprintf("%s→%s (%s)", e.From, e.To, e.Kind)
}

// Runs counts the runs of state's handler for obj, whether or not their
// walk was written.
func (e *Env) Runs(obj client.Object, state fsm.State) int {
	walks, _ := e.walks.of(obj, 0)
	n := 0
	for _, w := range walks {
		for _, s := range w.Steps {
			if s.State == state {
				n++
			}
		}
	}
	return n
}

// Walks returns what every reconcile of obj did, in order.
func (e *Env) Walks(obj client.Object) []fsm.Walk {
	walks, _ := e.walks.of(obj, 0)
	return walks
}

// Writes counts the operator's writes of obj by verb, as the API server
// saw them (not the cache).
func (e *Env) Writes(obj client.Object) Writes {
	e.T.Helper()
	k := e.apiKey(obj)
	var w Writes
	for _, wr := range e.api.all() {
		if wr.apiKey != k {
			continue
		}
		switch {
		case wr.Subresource == "status":
			w.Status++
		case wr.Verb == "create":
			w.Create++
		case wr.Verb == "update":
			w.Update++
		case wr.Verb == "patch":
			w.Patch++
		case wr.Verb == "apply":
			w.Apply++
		case wr.Verb == "delete":
			w.Delete++
		}
	}
	return w
}

// Reads counts the operator's reads of obj that went to the API server
// instead of its cache.
func (e *Env) Reads(obj client.Object) int {
	e.T.Helper()
	return e.api.readsOf(e.apiKey(obj))
}

// WriteLog lists every write of the operator, in order.
func (e *Env) WriteLog() []Write { return e.api.all() }

// apiKey names obj as the API's paths do.
func (e *Env) apiKey(obj client.Object) apiKey {
	e.T.Helper()
	e.inNamespace(obj)
	gvk := e.kindOf(obj)
	m, err := e.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		e.T.Fatalf("fsmtest: %v", err)
	}
	return apiKey{Group: gvk.Group, Resource: m.Resource.Resource, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// Event is an event about an object, as kubectl events shows it.
type Event struct {
	Type, Reason, Action, Note string
	// Count is how many times it happened; the events library folds
	// repeats into a series.
	Count int
}

// Events lists the events about obj, oldest first.
func (e *Env) Events(obj client.Object) []Event {
	e.T.Helper()
	var list eventsv1.EventList
	if err := e.Client.List(context.Background(), &list, client.InNamespace(e.Namespace)); err != nil {
		e.T.Fatal(err)
	}
	kind := e.kindOf(obj).Kind
	var items []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Name == obj.GetName() && ev.Regarding.Kind == kind {
			items = append(items, ev)
		}
	}
	slices.SortStableFunc(items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	out := make([]Event, len(items))
	for i, ev := range items {
		out[i] = Event{Type: ev.Type, Reason: ev.Reason, Action: ev.Action, Note: ev.Note, Count: 1}
		if ev.Series != nil {
			out[i].Count = int(ev.Series.Count)
		}
	}
	return out
}

// Child names a child object.
type Child struct {
	Kind, Namespace, Name string
}

// Children lists the objects that obj controls (a controller owner
// reference to it), of the kinds its machine owns, sorted.
func (e *Env) Children(obj client.Object) []Child {
	e.T.Helper()
	e.Get(obj)
	var out []Child
	for _, u := range e.children(obj.GetUID()) {
		out = append(out, Child{Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()})
	}
	return out
}

// children lists the objects of the watched kinds that uid controls.
func (e *Env) children(uid any) []unstructured.Unstructured {
	e.T.Helper()
	var out []unstructured.Unstructured
	for _, gvk := range e.childKinds() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		// A controller reference names an owner in the child's own
		// namespace, so a namespaced kind is listed in the test's alone:
		// other tests' objects, on a shared API server, would only cost.
		var in []client.ListOption
		if namespaced, err := apiutil.IsGVKNamespaced(gvk, e.Client.RESTMapper()); err == nil && namespaced {
			in = append(in, client.InNamespace(e.Namespace))
		}
		if err := e.Client.List(context.Background(), list, in...); err != nil {
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
				continue
			}
			e.T.Fatalf("fsmtest: listing %s: %v", gvk.Kind, err)
		}
		for _, u := range list.Items {
			if ns := u.GetNamespace(); ns != "" && ns != e.Namespace {
				continue
			}
			if ref := metav1.GetControllerOf(&u); ref != nil && (uid == nil || ref.UID == uid) {
				out = append(out, u)
			}
		}
	}
	slices.SortFunc(out, func(a, b unstructured.Unstructured) int {
		return strings.Compare(a.GetKind()+"/"+a.GetNamespace()+"/"+a.GetName(), b.GetKind()+"/"+b.GetNamespace()+"/"+b.GetName())
	})
	return out
}
