//go:build linux

package failover_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// process is one operator process.
type process struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed once it has exited and its output is read
	// signalled is set once the test has sent a signal: until then, an
	// exit is a failure.
	signalled atomic.Bool

	mu    sync.Mutex
	lines []line // what it printed on standard output
	logs  bytes.Buffer
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
	p := &process{t: t, name: name, exited: make(chan struct{})}
	p.cmd = exec.Command(bin,
		"-kubeconfig", rec.kubeconfig(name),
		"-identity", name,
		"-namespace", namespace,
		"-lease-duration", leaseDuration.String(),
		"-renew-deadline", renewDeadline.String(),
		"-retry-period", retryPeriod.String(),
		"-tick", tick.String(),
		fmt.Sprintf("-fence=%t", fenced),
	)
	// Should the test binary die, the kernel kills the operator too.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.logs.Write(b)
	})
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		defer close(p.exited)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.record(s.Text())
		}
		err := p.cmd.Wait()
		if !p.signalled.Load() {
			t.Errorf("%s exited by itself: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Logf("%s's log:\n%s", name, p.logs.String())
		}
	})
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

// signal sends sig to the process and returns when it was sent: just
// before, so that times measured from it are never too short.
func (p *process) signal(sig syscall.Signal) time.Time {
	p.t.Helper()
	p.signalled.Store(true)
	at := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("sending %v to %s: %v", sig, p.name, err)
	}
	return at
}

// waitExit waits until the process exits and returns when that was seen
// and its exit code (-1 if a signal killed it).
func (p *process) waitExit(within time.Duration) (time.Time, int) {
	p.t.Helper()
	select {
	case <-p.exited:
		return time.Now(), p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %v", p.name, within)
		return time.Time{}, 0
	}
}

// kill ends the process if it still runs, stopped or not, and waits for it.
func (p *process) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.signalled.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
