package fsmtest

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest/internal/explore"
)

// exploreOnce runs the scenario under the faults of s (none for the clean
// run) and checks it against Explore's oracles.
func exploreOnce[T fsm.Object](x *explorer, machine func(*Env) *fsm.Machine[T], scenario func(*Env), s explore.Schedule) *outcome {
	started := time.Now()
	rec := &runT{TB: x.t, name: x.t.Name() + "/" + s.String()}
	out := &outcome{Outcome: explore.Outcome{Schedule: s}}
	rec.do(func() {
		e := newEnv(rec, x.mapper)
		trace := explore.NewTracker(explore.World{Namespace: e.Namespace, Ignore: x.o.ignore}, len(s) < x.o.depth) // a run at the depth is not extended
		f := explore.Scheduled(s, x.o.lag, trace)
		snap := &snapshots{holdUntil: -1, ignore: x.o.ignore, effects: x.o.effects, trace: trace, lag: f.Lag()}
		if s != nil {
			snap.clean, snap.point = x.clean.snaps, s.String()
		}
		e.Timeout, e.snap = x.o.timeout, snap
		op := newOperator(e, machine, f, x.o.runOptions(e)...)
		defer func() {
			out.Points, out.Struck = trace.Result()
			out.Burstable = snap.lastChange() > 0
			out.transitions, out.snaps = e.transitions(), snap
		}()
		start := func() {
			if err := op.start(); err != nil {
				rec.Fatal(err)
			}
		}
		for _, a := range s {
			switch a.Kind {
			case explore.Clock:
				if snap.jumps == nil {
					snap.jumps = map[int]bool{}
				}
				snap.jumps[a.N] = true
			case explore.Burst:
				snap.holdUntil, snap.start = x.clean.snaps.lastChange(), start
				fallthrough
			case explore.Lag:
				trace.Struck(a, 0) // from the start
			}
		}
		if snap.holdUntil < 0 {
			start()
		}
		scenario(e)
		snap.countEffects(e)
		if snap.clean != nil {
			snap.compare(rec)
			snap.compareEffects(rec)
		}
		e.rests(op)
		e.leftovers()
	})
	out.Failures = rec.failures()
	out.Took = time.Since(started)
	return out
}

// rests checks eventual stable reconciliation: once the scenario ended
// and the operator was quiet, a resync (a new process, which reads every
// object anew) makes no write and takes no transition.
func (e *Env) rests(op *Operator) {
	e.T.Helper()
	e.snap.quiet(e)
	if q := e.api.quietFor(time.Now()); q <= e.snap.moment() {
		e.T.Errorf("fsmtest: %sthe operator never came to rest: 10s after the scenario ended, it still wrote (last: %s)", e.snap.faultPoint(), lastWrites(e.api.all(), 3))
		return
	}
	writes, walks := len(e.api.all()), e.walks.count()
	op.Restart()
	deadline := time.Now().Add(e.Timeout)
	for time.Now().Before(deadline) && (!e.resynced(walks) || e.api.quietFor(time.Now()) <= e.snap.moment()) {
		time.Sleep(50 * time.Millisecond)
	}
	e.snap.effectsAtRest(e)
	extra := e.api.all()[writes:]
	edges := e.walks.edgesSince(walks)
	if len(extra) == 0 && len(edges) == 0 {
		return
	}
	did := fmt.Sprintf("made %d write(s): %s", len(extra), lastWrites(extra, 5))
	if len(edges) > 0 {
		did = fmt.Sprintf("took %d transition(s): %s", len(edges), strings.Join(edges, "; "))
	}
	e.T.Errorf("fsmtest: %snot at rest (eventual stable reconciliation): once the scenario ended and the operator was quiet, "+
		"a resync (a new operator process, which reads every object anew) %s, with nothing changed. A machine at rest "+
		"writes nothing: does a handler write something new on every run, such as a counter or a time, or move on with "+
		"nothing to cause it?", e.snap.faultPoint(), did)
}

// resynced reports whether every object of the machines that exists was
// walked since the walk numbered from.
func (e *Env) resynced(from int) bool {
	walked := map[types.UID]bool{}
	e.walks.mu.Lock()
	for _, w := range e.walks.walks[min(from, len(e.walks.walks)):] {
		walked[w.UID] = true
	}
	e.walks.mu.Unlock()
	for _, u := range e.parentObjects() {
		if !walked[u.GetUID()] {
			return false
		}
	}
	return true
}

// parentObjects lists the objects of the machines' kinds in the namespace.
func (e *Env) parentObjects() []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, gvk := range e.parentKinds() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := e.Client.List(context.Background(), list, client.InNamespace(e.Namespace)); err != nil {
			e.T.Errorf("fsmtest: listing %s: %v", gvk.Kind, err)
			continue
		}
		out = append(out, list.Items...)
	}
	return out
}

// leftovers checks what the operator left once at rest: nothing still
// being deleted (a leaked finalizer), no child of kfsm's without its
// parent and without an owner reference (an orphan, which no garbage
// collector removes), and no write to an object that the scenario
// created other than the machines' own.
func (e *Env) leftovers() {
	e.T.Helper()
	live := map[string]bool{}
	for _, u := range e.parentObjects() {
		live[string(u.GetUID())] = true
		if u.GetDeletionTimestamp() != nil {
			e.T.Errorf("fsmtest: %s%s/%s is still being deleted once the operator came to rest, with finalizers %v: a finalizer leaked",
				e.snap.faultPoint(), u.GetKind(), u.GetName(), u.GetFinalizers())
		}
	}
	for _, u := range e.labelledChildren() {
		switch {
		case u.GetDeletionTimestamp() != nil:
			e.T.Errorf("fsmtest: %schild %s/%s is still being deleted once the operator came to rest, with finalizers %v",
				e.snap.faultPoint(), u.GetKind(), u.GetName(), u.GetFinalizers())
		case len(u.GetOwnerReferences()) == 0 && !live[u.GetLabels()[fsm.LabelOwnerUID]]:
			e.T.Errorf("fsmtest: %schild %s/%s is an orphan: its parent is gone and no owner reference lets the garbage collector remove it",
				e.snap.faultPoint(), u.GetKind(), u.GetName())
		}
	}
	e.kindsMu.Lock()
	own := map[apiKey]bool{}
	for _, k := range e.resources {
		own[k] = true
	}
	e.kindsMu.Unlock()
	for _, w := range e.api.all() {
		if w.Verb != "create" && !own[apiKey{Group: w.Group, Resource: w.Resource}] && slices.Contains(e.snap.mine, w.apiKey) {
			e.T.Errorf("fsmtest: %sthe operator wrote %s, which the scenario created and no machine owns (%s)", e.snap.faultPoint(), w.Name, w)
		}
	}
}

// labelledChildren lists the objects of the machines' child kinds that
// kfsm labels as a child of an object in the test's namespace.
func (e *Env) labelledChildren() []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, gvk := range e.childKinds() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := e.Client.List(context.Background(), list, client.HasLabels{fsm.LabelOwnerUID}); err != nil {
			continue // a kind the cluster does not serve
		}
		for _, u := range list.Items {
			owner := u.GetAnnotations()[fsm.AnnotationOwner]
			if u.GetNamespace() == e.Namespace || strings.HasPrefix(owner, e.Namespace+"/") {
				out = append(out, u)
			}
		}
	}
	return out
}

// transitions lists the transitions of the run's committed walks.
func (e *Env) transitions() []string {
	return e.walks.edgesSince(0)
}

func (l *walkLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.walks)
}

// edgesSince lists the edges of the committed walks from the i-th on.
func (l *walkLog) edgesSince(i int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, w := range l.walks[min(i, len(l.walks)):] {
		if !w.Committed {
			continue
		}
		for _, edge := range w.Edges {
			from := string(edge.From)
			if from == "" {
				from = "(deleted)"
			}
			out = append(out, fmt.Sprintf("%s %s: %s → %s", w.machine, w.Object.Name, from, edge.To))
		}
	}
	return out
}

// lastWrites names the last n of writes.
func lastWrites(writes []Write, n int) string {
	parts := make([]string, 0, n)
	for _, w := range writes[max(0, len(writes)-n):] {
		parts = append(parts, w.String())
	}
	return strings.Join(parts, "; ")
}

// runT is the testing.TB of one of Explore's runs: it keeps the
// run's failures for Explore to report, shrunk, instead of failing the
// test at once, and runs the run's cleanups at its end.
type runT struct {
	testing.TB
	name string

	mu       sync.Mutex
	msgs     []string
	cleanups []func()
}

func (r *runT) Name() string        { return r.name }
func (r *runT) Helper()             {}
func (r *runT) Log(...any)          {}
func (r *runT) Logf(string, ...any) {}

func (r *runT) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *runT) Error(args ...any)                 { r.fail(fmt.Sprint(args...)) }
func (r *runT) Errorf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }
func (r *runT) Fail()                             { r.fail("failed") }
func (r *runT) FailNow()                          { r.fail("failed"); runtime.Goexit() }
func (r *runT) Fatal(args ...any)                 { r.fail(fmt.Sprint(args...)); runtime.Goexit() }
func (r *runT) Fatalf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (r *runT) Skip(args ...any)                 { r.fail("skipped: " + fmt.Sprint(args...)); runtime.Goexit() }
func (r *runT) Skipf(format string, args ...any) { r.Skip(fmt.Sprintf(format, args...)) }
func (r *runT) SkipNow()                         { r.Skip() }

func (r *runT) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs) > 0
}

func (r *runT) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msg)
}

func (r *runT) failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// do runs f as a test's body: a Fatal ends it, a panic fails it, and the
// cleanups run after it, last registered first.
func (r *runT) do(f func()) {
	guarded(r, f)
	for {
		r.mu.Lock()
		if len(r.cleanups) == 0 {
			r.mu.Unlock()
			return
		}
		c := r.cleanups[len(r.cleanups)-1]
		r.cleanups = r.cleanups[:len(r.cleanups)-1]
		r.mu.Unlock()
		guarded(r, c)
	}
}

// guarded runs f on a goroutine of its own, which a Fatal may end, and
// waits for it.
func guarded(r *runT, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				r.fail(fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		f()
	}()
	<-done
}
