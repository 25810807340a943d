package fsmtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kfsm/kfsm/fsm"
)

// Stepper runs a machine one reconcile at a time, each step returning
// what happened, so that a test can tell apart a handler that continues
// at once, waits, is done or fails. It does not watch: Await runs the
// reconciles that are due, as the machine asked (by its clock or, for
// an action, through its queue) or because someone else changed the
// object.
type Stepper[T fsm.Object] struct {
	e *Env
	r reconcile.Reconciler
	// due is when each object runs again, by the machine's clock; zero
	// means at once, and a missing object runs when it changes.
	due   map[types.NamespacedName]time.Time
	seen  map[types.NamespacedName]string // resourceVersion after the last step
	woken *wakes
}

// StepResult is what one reconcile did.
type StepResult struct {
	// Walk is what the machine did; Walked is false when the reconcile
	// ran no walk (the object is gone, paused, or the cache is stale).
	fsm.Walk
	Walked bool
	// Result and Err are what Reconcile returned to controller-runtime.
	Result reconcile.Result
	Err    error
}

// Kind is the kind of the last handler's result, or "" when no handler
// ran.
func (s StepResult) Kind() fsm.ResultKind {
	if len(s.Steps) == 0 {
		return ""
	}
	return s.Steps[len(s.Steps)-1].Result
}

// States lists the states whose handler ran, in order.
func (s StepResult) States() []fsm.State {
	out := make([]fsm.State, len(s.Steps))
	for i, st := range s.Steps {
		out[i] = st.State
	}
	return out
}

// Transitions lists the moves the step made, as Env.Transitions does.
func (s StepResult) Transitions() []string { return transitionsOf(s.Walk) }

func (s StepResult) String() string {
	var runs []string
	for _, st := range s.Steps {
		runs = append(runs, fmt.Sprintf("%s: %s", st.State, st.Result))
	}
	return fmt.Sprintf("ran [%s], took %v, requeue %v (at once: %v), error %v", strings.Join(runs, ", "), s.Transitions(), s.RequeueAfter, s.Soon, s.Err)
}

// Steps returns a step driver for m in e's namespace, whose reconciles
// make Await work. Its writes are counted like an operator's.
func Steps[T fsm.Object](e *Env, m *fsm.Machine[T]) *Stepper[T] {
	e.T.Helper()
	observe(m)
	e.watchKind(newObject[T](), m.OwnedTypes())
	e.noteResource(m.Name(), newObject[T]())
	c, err := client.New(e.operatorConfig(nil), client.Options{Scheme: e.Scheme})
	if err != nil {
		e.T.Fatal(err)
	}
	r, err := m.Reconciler(c, &recorder{e: e})
	if err != nil {
		e.T.Fatalf("fsmtest: %v", err)
	}
	s := &Stepper[T]{e: e, r: r, due: map[types.NamespacedName]time.Time{}, seen: map[types.NamespacedName]string{}}
	if s.woken, err = listen(e, r); err != nil {
		e.T.Fatalf("fsmtest: %v", err)
	}
	e.driver = s
	return s
}

// Step runs one reconcile of obj.
func (s *Stepper[T]) Step(obj client.Object) StepResult {
	s.e.T.Helper()
	s.e.inNamespace(obj)
	key := client.ObjectKeyFromObject(obj)
	s.woken.take(key) // this step sees what the actions asked it to
	_, from := s.e.walks.of(obj, 1<<62)
	res, err := s.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
	walks, _ := s.e.walks.of(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}, from)
	out := StepResult{Result: res, Err: err}
	if len(walks) > 0 {
		out.Walk, out.Walked = walks[len(walks)-1], true
	}
	s.schedule(key, out)
	return out
}

// schedule notes when key runs again.
func (s *Stepper[T]) schedule(key types.NamespacedName, out StepResult) {
	now := s.e.Clock.Now()
	delete(s.due, key)
	var he *fsm.HandlerError
	switch {
	case out.Walked && out.Soon, !out.Walked && out.Result.RequeueAfter > 0:
		s.due[key] = now
	case errors.As(out.Err, &he) && he.RetryAfter > 0:
		s.due[key] = now.Add(he.RetryAfter)
	case out.Walked && out.RequeueAfter > 0:
		s.due[key] = now.Add(out.RequeueAfter)
	case out.Err != nil && !errors.Is(out.Err, reconcile.TerminalError(nil)):
		s.due[key] = now // a write that failed
	}
	obj := newObject[T]()
	obj.SetName(key.Name)
	obj.SetNamespace(key.Namespace)
	if s.e.Get(obj) {
		s.seen[key] = obj.GetResourceVersion()
	} else {
		delete(s.seen, key)
	}
}

// Settle steps obj while a step is due now, by the machine's clock or
// because an action asked for one: it stops when the machine waits for
// time, for a change or for an action, and returns every step. It fails
// the test after 100 steps.
func (s *Stepper[T]) Settle(obj client.Object) []StepResult {
	s.e.T.Helper()
	var out []StepResult
	key := client.ObjectKeyFromObject(obj)
	for range 100 {
		out = append(out, s.Step(obj))
		if at, ok := s.due[key]; (!ok || at.After(s.e.Clock.Now())) && !s.woken.has(key) {
			return out
		}
	}
	s.e.T.Fatalf("fsmtest: %s did not settle in 100 steps; the last: %v", s.e.describe(obj), out[len(out)-1])
	return out
}

// dueNow lists the objects of the machine's kind that are due: new,
// changed by someone else since their last step, or asked for by the
// machine's clock or its actions.
func (s *Stepper[T]) dueNow() []types.NamespacedName {
	s.e.T.Helper()
	list, err := listOf[T](s.e)
	if err != nil {
		s.e.T.Fatal(err)
	}
	now := s.e.Clock.Now()
	var out []types.NamespacedName
	for _, obj := range list {
		key := client.ObjectKeyFromObject(obj)
		rv, stepped := s.seen[key]
		at, asked := s.due[key]
		if !stepped || rv != obj.GetResourceVersion() || (asked && !at.After(now)) || s.woken.has(key) {
			out = append(out, key)
		}
	}
	return out
}

// nextDue says when the next object is due by the clock, if one is.
func (s *Stepper[T]) nextDue() string {
	now := s.e.Clock.Now()
	var next time.Time
	for _, at := range s.due {
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	if next.IsZero() {
		return ""
	}
	return fmt.Sprintf("; the next step is due at %v, %v from now: move the clock with e.Clock.Step", next.Format(time.TimeOnly), next.Sub(now))
}

// acting reports whether an object runs an action: a record of its
// state without an outcome, nor the error of a failed run that waits for
// its retry. The records of the states an object left are gone, and
// those that a deletion cancelled stay in a state it left.
func (s *Stepper[T]) acting() bool {
	s.e.T.Helper()
	list, err := listOf[T](s.e)
	if err != nil {
		s.e.T.Fatal(err)
	}
	for _, o := range list {
		obj := newObject[T]()
		obj.SetName(o.GetName())
		obj.SetNamespace(o.GetNamespace())
		if !s.e.Get(obj) {
			continue
		}
		st := obj.FSMStatus()
		for _, a := range st.Actions {
			if a.Outcome == "" && a.Error == "" && a.State == st.State {
				return true
			}
		}
	}
	return false
}

// await runs the reconciles that are due until cond holds. When nothing
// is due while an action runs, it waits for the machine to ask for a
// reconcile, as a manager's queue would.
func (s *Stepper[T]) await(what string, cond func() (bool, string)) {
	s.e.T.Helper()
	for range 1000 {
		if ok, _ := cond(); ok {
			return
		}
		woken := s.woken.next()
		due := s.dueNow()
		if len(due) == 0 {
			acting := s.acting()
			if acting && closedWithin(woken, s.e.Timeout) {
				continue
			}
			// cond read the API server's watch cache, which may not yet
			// have the last write: a patch that takes the last finalizer
			// off deletes the object but answers with the version before,
			// which is all a read at the newest known version waits for.
			ok, why := s.e.fresh(cond)
			if ok {
				return
			}
			if acting {
				why += fmt.Sprintf("; an action runs, and asked for no reconcile in %v", s.e.Timeout)
			}
			s.e.fatalf("nothing is due (by the clock, at %v) and %s does not: %s%s", s.e.Clock.Now().Format(time.TimeOnly), what, why, s.nextDue())
		}
		for _, key := range due {
			obj := newObject[T]()
			obj.SetName(key.Name)
			obj.SetNamespace(key.Namespace)
			s.Step(obj)
		}
	}
	s.e.T.Fatalf("fsmtest: 1000 rounds of steps and still not %s", what)
}

// wakes are the reconciles that the machine asks for outside any
// reconcile: when an action ends, saves a checkpoint or beats. It adds
// them to the queue that the step driver gives its reconciler, as it adds
// them to a manager's.
type wakes struct {
	mu    sync.Mutex
	keys  map[types.NamespacedName]bool
	added chan struct{} // closed and replaced when a key is added
}

// listen starts r, as the source of its actions' requests, with a queue
// whose requests wake their objects until the test ends.
func listen(e *Env, r reconcile.Reconciler) (*wakes, error) {
	src, ok := r.(source.TypedSource[reconcile.Request])
	if !ok {
		return nil, fmt.Errorf("the reconciler of the machine, a %T, is no source of its actions' requests", r)
	}
	w := &wakes{keys: map[types.NamespacedName]bool{}, added: make(chan struct{})}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	ctx, cancel := context.WithCancel(context.Background())
	e.T.Cleanup(func() {
		cancel() // and the actions with it
		q.ShutDown()
	})
	if err := src.Start(ctx, q); err != nil {
		return nil, err
	}
	go func() {
		for {
			req, shutdown := q.Get()
			if shutdown {
				return
			}
			q.Done(req)
			w.mu.Lock()
			w.keys[req.NamespacedName] = true
			close(w.added)
			w.added = make(chan struct{})
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// take reports whether key was woken since the last take, and forgets it.
func (w *wakes) take(key types.NamespacedName) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	woken := w.keys[key]
	delete(w.keys, key)
	return woken
}

func (w *wakes) has(key types.NamespacedName) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys[key]
}

// next is closed when the next key is woken.
func (w *wakes) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.added
}

// closedWithin reports whether ch is closed within timeout.
func closedWithin(ch <-chan struct{}, timeout time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(timeout):
		return false
	}
}
