package fsmtest

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kfsm/kfsm/fsm"
)

// actionLog follows the actions of the operator's machines in a test's
// namespace. The step driver has no queue for an action's end to wake: an
// object whose action ended is due, and while actions run, nothing due is
// no reason to give up yet. A fake clock is not moved while one runs.
type actionLog struct {
	mu      sync.Mutex
	running map[types.NamespacedName]int
	ended   map[types.NamespacedName]bool
	change  chan struct{} // closed and replaced when an action ends
	starts  int           // actions started, in all the operator's processes
	life    *life         // the operator process that runs now
}

func newActionLog() *actionLog {
	return &actionLog{running: map[types.NamespacedName]int{}, ended: map[types.NamespacedName]bool{}, change: make(chan struct{})}
}

// observe is the machine's OnAction observer.
func (l *actionLog) observe(obj types.NamespacedName, name string, a fsm.Action) {
	l.mu.Lock()
	life := l.life
	if a.State == fsm.ActionPending {
		l.running[obj]++
		l.starts++
	} else {
		if l.running[obj]--; l.running[obj] <= 0 {
			delete(l.running, obj)
		}
		l.ended[obj] = true
		close(l.change)
		l.change = make(chan struct{})
	}
	l.mu.Unlock()
	if life != nil {
		life.action(obj, name, a)
	}
}

// begin notes a new operator process, in which no action runs yet: those
// of the process before were cancelled, and a cancelled action reports
// no end.
func (l *actionLog) begin(life *life) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.life = life
	clear(l.running)
}

// dead reports whether the operator process that runs now has crashed:
// what it still does until it is stopped is no process's.
func (l *actionLog) dead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.life != nil && l.life.crashed.Load()
}

// started is how many actions started so far.
func (l *actionLog) started() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.starts
}

// take reports whether an action of obj ended since the last take.
func (l *actionLog) take(obj types.NamespacedName) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ended := l.ended[obj]
	delete(l.ended, obj)
	return ended
}

// endedOf reports whether an action of obj ended since its last step.
func (l *actionLog) endedOf(obj types.NamespacedName) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended[obj]
}

// waitForEnd waits until an action of an existing object ends, up to
// timeout; it reports false when none runs, or none ended in time.
func (l *actionLog) waitForEnd(exists func(types.NamespacedName) bool, timeout time.Duration) bool {
	l.mu.Lock()
	change := l.change
	running := false
	for obj := range l.running {
		if exists(obj) {
			running = true
		} else {
			delete(l.running, obj) // deleted: its actions were cancelled
		}
	}
	l.mu.Unlock()
	if !running {
		return false
	}
	select {
	case <-change:
		return true
	case <-time.After(timeout):
		return false
	}
}

// runningAny reports whether an action runs.
func (l *actionLog) runningAny() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.running) > 0
}
