package fsm

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/shard"
)

// ActionState is where an asynchronous action stands.
type ActionState int

const (
	// ActionPending: the action is queued or running.
	ActionPending ActionState = iota + 1
	// ActionSucceeded: the action returned nil.
	ActionSucceeded
	// ActionFailed: the action returned an error or panicked; see
	// Action.Err.
	ActionFailed
)

func (s ActionState) String() string {
	switch s {
	case ActionPending:
		return "Pending"
	case ActionSucceeded:
		return "Succeeded"
	case ActionFailed:
		return "Failed"
	}
	return fmt.Sprintf("ActionState(%d)", int(s))
}

// Action is what [Request.Action] reports about an asynchronous action.
type Action struct {
	State ActionState
	// Err is the action's error when it failed.
	Err error
}

// actionKey names an action: the object and the action's name.
type actionKey struct {
	object types.NamespacedName
	name   string
}

type actionRun struct {
	uid      types.UID
	state    ActionState
	err      error
	cancel   context.CancelFunc
	deleting bool          // started on the deletion path
	seen     bool          // reported to a handler in the current reconcile
	done     chan struct{} // closed when the action has returned
}

// actions runs a machine's asynchronous actions in a bounded pool and wakes
// the object when one finishes.
type actions struct {
	machine string
	slots   chan struct{} // one per action that may run at once
	log     logr.Logger
	redact  func(string) string
	watch   []func(types.NamespacedName, string, Action) // Machine.OnAction

	mu      sync.Mutex
	runs    map[actionKey]*actionRun
	running map[string]int // actions running now, by name, for the gauge
	base    context.Context
	stop    context.CancelFunc
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func newActions(machine string, limit int, log logr.Logger, redact func(string) string, watch []func(types.NamespacedName, string, Action)) *actions {
	base, stop := context.WithCancel(context.Background())
	return &actions{
		machine: machine,
		slots:   make(chan struct{}, max(limit, 1)),
		log:     log,
		redact:  redact,
		watch:   watch,
		runs:    map[actionKey]*actionRun{},
		running: map[string]int{},
		base:    base,
		stop:    stop,
	}
}

// start is the source that SetupWithManager registers: it gives the pool
// the controller's queue, and cancels every action when the manager stops.
func (a *actions) start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	a.mu.Lock()
	a.queue = q
	a.mu.Unlock()
	go func() {
		<-ctx.Done()
		a.stop()
	}()
	return nil
}

// get reports the action of an object, starting it if it is not known.
// A finished action is reported until a reconcile that saw it completes
// (see settle); then it is forgotten, and asking again starts it anew.
func (a *actions) get(obj types.NamespacedName, uid types.UID, name string, deleting bool, run func(context.Context) error) Action {
	key := actionKey{object: obj, name: name}
	a.mu.Lock()
	if r, ok := a.runs[key]; ok {
		if r.uid == uid {
			if r.state != ActionPending {
				r.seen = true
			}
			a.mu.Unlock()
			return Action{State: r.state, Err: r.err}
		}
		r.cancel() // an earlier object of the same name
		delete(a.runs, key)
	}
	ctx, cancel := context.WithCancel(a.base)
	r := &actionRun{uid: uid, state: ActionPending, cancel: cancel, deleting: deleting, done: make(chan struct{})}
	a.runs[key] = r
	a.mu.Unlock()
	started := Action{State: ActionPending}
	a.tell(key, started)
	go a.run(ctx, key, r, run)
	return started
}

// tell reports an action's start or end to the machine's OnAction
// observers.
func (a *actions) tell(key actionKey, at Action) {
	for _, observe := range a.watch {
		observe(key.object, key.name, at)
	}
}

func (a *actions) run(ctx context.Context, key actionKey, r *actionRun, run func(context.Context) error) {
	defer close(r.done)
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	a.countRunning(key.name, 1)
	err := safely(ctx, run)
	a.countRunning(key.name, -1)
	<-a.slots

	a.mu.Lock()
	if a.runs[key] != r || ctx.Err() != nil {
		// Cancelled: the object went, or the manager stopped.
		a.mu.Unlock()
		return
	}
	r.state, r.err = ActionSucceeded, err
	if err != nil {
		r.state = ActionFailed
		actionsFailed.WithLabelValues(a.machine, key.name).Inc()
		logged := err
		if a.redact != nil {
			logged = errors.New(a.redact(err.Error()))
		}
		a.log.Error(logged, "action failed", "machine", a.machine, "object", key.object.String(), "action", key.name)
	} else {
		actionsCompleted.WithLabelValues(a.machine, key.name).Inc()
	}
	q, ended := a.queue, Action{State: r.state, Err: r.err}
	a.mu.Unlock()
	a.tell(key, ended)
	if q != nil {
		// At once, not after a requeue timer.
		q.Add(reconcile.Request{NamespacedName: key.object})
	}
}

// countRunning keeps kfsm_actions_running, and removes an action's series
// when none runs, so that names of finished actions do not pile up.
func (a *actions) countRunning(name string, delta int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.running[name] + delta
	if n > 0 {
		a.running[name] = n
		actionsRunning.WithLabelValues(a.machine, name).Set(float64(n))
		return
	}
	delete(a.running, name)
	actionsRunning.DeleteLabelValues(a.machine, name)
}

func safely(ctx context.Context, run func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("action panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return run(ctx)
}

// settle ends a reconcile of obj: after a complete one, the finished
// actions it reported are forgotten; after a failed one they are reported
// again next time.
func (a *actions) settle(obj types.NamespacedName, completed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, r := range a.runs {
		if key.object != obj || !r.seen {
			continue
		}
		if completed {
			delete(a.runs, key)
		} else {
			r.seen = false
		}
	}
}

// cancel stops the actions of an object: all of them when it is gone, or
// those started before its deletion began when it is being deleted.
func (a *actions) cancel(obj types.NamespacedName, keepDeletion bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, r := range a.runs {
		if key.object == obj && (!keepDeletion || !r.deleting) {
			r.cancel()
			delete(a.runs, key)
		}
	}
}

// cancelSlots stops the actions of the objects in the hash slots, for a
// replica that gives them up, and returns channels that close once they
// have returned.
func (a *actions) cancelSlots(lost shard.Slots) []<-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	var done []<-chan struct{}
	for key, r := range a.runs {
		if lost.Has(SlotOf(r.uid)) {
			r.cancel()
			delete(a.runs, key)
			done = append(done, r.done)
		}
	}
	return done
}
