package fsmtest

import (
	"context"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm/sharding"
)

// Replicas runs the operator of each of Faults' and Explore's runs as n
// replicas that share the machine, as a sharded operator runs: each
// replica is a process of its own (a manager, its caches, a Lease in the
// test's namespace), prepared with sharding.New (Leases of 4 s) and
// given the machine with Machine.Sharded. The machine function is called
// once per process and must make a new machine each time.
//
// A crash kills the replica that made the write. A new process of that
// replica, with an identity of its own, takes its place, as a restarted
// Pod would; the crashed process's objects move once its Lease expired.
// Writes are numbered by object, across the replicas: the replay of a
// schedule strikes the same write to the same object, whichever replica
// holds it then.
//
// Besides the other oracles, every run is checked for an object that two
// replicas reconciled at once: the spans of their walks (fsm.Walk's Began
// to Ended) must not overlap.
func Replicas(n int) FaultOption {
	return func(o *faultOptions) {
		if n < 1 {
			o.refuse("Replicas(%d): an operator runs at least one replica", n)
		}
		o.replicas = n
	}
}

// runOptions are the options of the operator of one of Faults' or
// Explore's runs, in e.
func (o *faultOptions) runOptions(e *Env) []RunOption {
	var opts []RunOption
	for _, a := range o.also {
		opts = append(opts, With(a(e)))
	}
	if o.replicas > 1 {
		opts = append(opts, func(r *runOptions) { r.replicas, r.group = o.replicas, o.group })
	}
	return opts
}

// held reports whether, under Replicas, a live replica holds the slot of
// every object of the machine: the objects of a crashed replica wait until
// its Lease expired, and until then the operator's quiet is no rest.
func (e *Env) held() bool {
	o, ok := e.driver.(*Operator)
	if !ok || len(o.procs) < 2 {
		return true
	}
	live := map[string]bool{}
	o.mu.Lock()
	for _, p := range o.procs {
		live[p.identity] = !p.life.crashed.Load()
	}
	o.mu.Unlock()
	var leases coordinationv1.LeaseList
	if err := e.Client.List(context.Background(), &leases, client.InNamespace(e.Namespace), client.HasLabels{sharding.LabelShards}); err != nil {
		return false
	}
	e.kindsMu.Lock()
	var holder func(types.UID) string
	for name := range e.resources {
		if h, ok := sharding.Holders(leases.Items, name); ok {
			holder = h // the replicas hold the slots of all their machines
			break
		}
	}
	e.kindsMu.Unlock()
	if holder == nil {
		return false
	}
	for _, u := range e.parentObjects() {
		if !live[holder(u.GetUID())] {
			return false
		}
	}
	return true
}

// overlaps fails the test for each object that two replicas reconciled
// at once.
func (e *Env) overlaps() {
	e.T.Helper()
	e.walks.mu.Lock()
	byUID := map[types.UID][]machineWalk{}
	var order []types.UID
	for _, w := range e.walks.walks {
		if w.replica == "" || w.Began.IsZero() {
			continue
		}
		if byUID[w.UID] == nil {
			order = append(order, w.UID)
		}
		byUID[w.UID] = append(byUID[w.UID], w)
	}
	e.walks.mu.Unlock()
	for _, uid := range order {
		if a, b, ok := overlap(byUID[uid]); ok {
			e.T.Errorf("fsmtest: %s%s %s was reconciled by two replicas at once: by %s from %s to %s, and by %s from %s to %s. "+
				"A sharded machine's replica reconciles an object only while it holds the object's slot, and gives a slot up only once its reconciles ended",
				e.snap.faultPoint(), a.machine, a.Object.Name, a.replica, stamp(a.Began), stamp(a.Ended), b.replica, stamp(b.Began), stamp(b.Ended))
		}
	}
}

// overlap finds two walks of one object by different replicas whose
// spans overlap, if there are any.
func overlap(walks []machineWalk) (a, b machineWalk, ok bool) {
	walks = slices.Clone(walks)
	slices.SortFunc(walks, func(x, y machineWalk) int { return x.Began.Compare(y.Began) })
	latest := map[string]machineWalk{} // by replica, the walk that ended last so far
	for _, w := range walks {
		for r, prev := range latest {
			if r != w.replica && prev.Ended.After(w.Began) {
				return prev, w, true
			}
		}
		if prev, seen := latest[w.replica]; !seen || w.Ended.After(prev.Ended) {
			latest[w.replica] = w
		}
	}
	return a, b, false
}

// stamp prints a wall-clock time to the millisecond.
func stamp(t time.Time) string { return t.Format("15:04:05.000") }
