package fsmtest

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kfsm/kfsm/fsm"
)

// actionLog follows the actions of the operator's machines in a test's
// namespace: how many started, for Faults to report, and which run, so
// that a fake clock is not moved while one runs. It also strikes the
// crashes of CrashInAction. Neither driver learns here that an action
// ended: the machine asks for the reconcile through its queue.
type actionLog struct {
	mu      sync.Mutex
	running map[runningAction]int
}

// runningAction names the actions of an object that a process runs.
type runningAction struct {
	obj  types.NamespacedName
	life *life
}

func newActionLog() *actionLog {
	return &actionLog{running: map[runningAction]int{}}
}

// observe is the machine's Action observer; p is the process whose
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
	} else {
		if l.running[k]--; l.running[k] <= 0 {
			delete(l.running, k)
		}
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

// runningAny reports whether an action runs.
func (l *actionLog) runningAny() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.running) > 0
}
