//go:build linux

package effects_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kfsm/kfsm/internal/proctest"
)

// operatorFlags are what a process of the operator is started with.
type operatorFlags struct {
	kubeconfig, namespace, service string
	// mode is how an interrupted charge resumes: keys, observe or neither.
	mode string
	// crash is the operator's own crash point, if any.
	crash   string
	sharded bool
	// callTimeout, when set, bounds each request to the service.
	callTimeout time.Duration
}

func (f operatorFlags) args(identity string) []string {
	args := []string{
		"-kubeconfig", f.kubeconfig,
		"-identity", identity,
		"-namespace", f.namespace,
		"-service", f.service,
		"-mode", f.mode,
		"-crash", f.crash,
		fmt.Sprintf("-sharded=%t", f.sharded),
	}
	if f.callTimeout > 0 {
		args = append(args, "-call-timeout", f.callTimeout.String())
	}
	if f.sharded {
		args = append(args,
			"-lease-duration", leaseDuration.String(),
			"-renew-deadline", renewDeadline.String(),
			"-retry-period", retryPeriod.String(),
		)
	}
	return args
}

// process is one operator process.
type process struct {
	*proctest.Process
	t    *testing.T
	name string
	// mayDie: the process is to die by SIGKILL, its own or another's.
	mayDie bool

	mu     sync.Mutex
	events []event // what it printed on standard output
}

// event is a line that the operator printed: what happened, to which
// gadget, and a detail.
type event struct {
	what, gadget, detail string
}

// startOperator starts the operator as the named process. An exit is a
// failure unless the test signalled it, or it may die and died by
// SIGKILL. The process is killed when the test ends, and its log shown if
// the test failed.
func startOperator(t *testing.T, bin, name string, flags operatorFlags, mayDie bool) *process {
	t.Helper()
	p := &process{t: t, name: name, mayDie: mayDie}
	p.Process = proctest.Start(t, name, bin, flags.args(name), proctest.Options{Lines: p.record, MayDie: mayDie})
	return p
}

// record keeps a line "<RFC 3339 time> <identity> <what> <gadget> <detail>".
func (p *process) record(text string) {
	f := strings.Fields(text)
	if len(f) != 5 {
		p.t.Errorf("%s printed %q, not a time, its name, an event, a gadget and a detail", p.name, text)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, event{what: f[2], gadget: f[3], detail: f[4]})
}

// said returns the events of the kind what that the process printed.
func (p *process) said(what string) []event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []event
	for _, e := range p.events {
		if e.what == what {
			out = append(out, e)
		}
	}
	return out
}

// eventually polls cond until it holds, and fails the test after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	proctest.Eventually(t, within, what, func() (bool, string) { return cond(), "" })
}
