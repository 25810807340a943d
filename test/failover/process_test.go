//go:build linux

package failover_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kfsm/kfsm/internal/proctest"
)

// process is one operator process.
type process struct {
	*proctest.Process
	t    *testing.T
	name string

	mu    sync.Mutex
	lines []line // what it printed on standard output
}

// line is a line an operator printed: the time it printed it, by its own
// clock, and what it said.
type line struct {
	at   time.Time
	what string
}

// startOperator starts the operator as the named process, with its own
// proxy of the recorder. The process is killed when the test ends, and its
// log shown if the test failed.
func startOperator(t *testing.T, bin string, rec *recorder, name, namespace string, fenced bool) *process {
	t.Helper()
	p := &process{t: t, name: name}
	p.Process = proctest.Start(t, name, bin, []string{
		"-kubeconfig", rec.kubeconfig(name),
		"-identity", name,
		"-namespace", namespace,
		"-lease-duration", leaseDuration.String(),
		"-renew-deadline", renewDeadline.String(),
		"-retry-period", retryPeriod.String(),
		"-tick", tick.String(),
		fmt.Sprintf("-fence=%t", fenced),
	}, proctest.Options{Lines: p.record})
	return p
}

// record keeps a line "<RFC 3339 time> <identity> <what>".
func (p *process) record(text string) {
	stamp, rest, _ := strings.Cut(text, " ")
	_, what, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		p.t.Errorf("%s printed %q, not a time and a word", p.name, text)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, line{at: at, what: what})
}

// said returns the first line in which the process said what.
func (p *process) said(what string) (line, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if l.what == what {
			return l, true
		}
	}
	return line{}, false
}

// waitSaid waits until the process says what.
func (p *process) waitSaid(what string, within time.Duration) line {
	p.t.Helper()
	var l line
	eventually(p.t, within, fmt.Sprintf("%s to say %q", p.name, what), func() bool {
		var ok bool
		l, ok = p.said(what)
		return ok
	})
	return l
}

// waitExit waits until the process exits and returns when that was seen
// and its exit code (-1 if a signal killed it).
func (p *process) waitExit(within time.Duration) (time.Time, int) {
	p.t.Helper()
	code := p.WaitExit(within)
	return time.Now(), code
}
