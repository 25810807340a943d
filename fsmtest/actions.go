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
	running map[runningAction]int
	ended   map[types.NamespacedName]bool
	change  chan struct{} // closed and replaced when an action ends
	starts  int           // actions started, in all the operator's processes
}

// runningAction names the actions of an object that a process runs.
type runningAction struct {
	obj  types.NamespacedName
	life *life
}

func newActionLog() *actionLog {
	return &actionLog{running: map[runningAction]int{}, ended: map[types.NamespacedName]bool{}, change: make(chan struct{})}
}

// observe is the machine's OnAction observer; p is the process whose
// machine it is.
func (l *actionLog) observe(obj types.NamespacedName, name string, a fsm.Action, p *process) {
	var life *life
	if p != nil {
		life = p.life
	}
	k := runningAction{obj: obj, life: life}
	l.mu.Lock()
	if a.State == fsm.ActionPending {
		l.running[k]++
		l.starts++
	} else {
		if l.running[k]--; l.running[k] <= 0 {
			delete(l.running, k)
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

// end notes that a process has ended: its actions were cancelled, and a
// cancelled action reports no end.
func (l *actionLog) end(life *life) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.running {
		if k.life == life {
			delete(l.running, k)
		}
	}
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
	for k := range l.running {
		if exists(k.obj) {
			running = true
		} else {
			delete(l.running, k) // deleted: its actions were cancelled
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
