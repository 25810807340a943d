//go:build linux

package effects_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// operatorFlags are what a process of the operator is started with.
type operatorFlags struct {
	kubeconfig, namespace, service string
	// mode is how an interrupted charge resumes: keys, observe or neither.
	mode string
	// crash is the operator's own crash point, if any.
	crash   string
	sharded bool
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
	t    *testing.T
	name string
	cmd  *exec.Cmd
	// exited is closed once the process has exited and its output is read.
	exited chan struct{}
	// mayDie: the process is to die by SIGKILL, its own or another's.
	mayDie bool
	// signalled is set once the test has sent a signal.
	signalled atomic.Bool

	mu     sync.Mutex
	events []event // what it printed on standard output
	logs   bytes.Buffer
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
	p := &process{t: t, name: name, exited: make(chan struct{}), mayDie: mayDie}
	p.cmd = exec.Command(bin, flags.args(name)...)
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
		switch {
		case p.signalled.Load():
		case !p.mayDie:
			t.Errorf("%s exited by itself: %v", name, err)
		case !p.killed():
			t.Errorf("%s exited, but not by SIGKILL: %v", name, err)
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

// died reports whether the process has exited.
func (p *process) died() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// killed reports whether SIGKILL ended the process. Call it once it has
// exited.
func (p *process) killed() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// waitExit waits until the process exits.
func (p *process) waitExit(within time.Duration) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %v", p.name, within)
	}
}

// kill SIGKILLs the process if it still runs, and waits until it has
// exited.
func (p *process) kill() {
	if p.died() {
		return
	}
	p.signalled.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// writeKubeconfig writes a kubeconfig with cfg's server and credentials,
// for the operator processes.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.CAFile,
		CertificateAuthorityData: cfg.CAData,
		TLSServerName:            cfg.ServerName,
		InsecureSkipTLSVerify:    cfg.Insecure,
	}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{
		ClientCertificate:     cfg.CertFile,
		ClientCertificateData: cfg.CertData,
		ClientKey:             cfg.KeyFile,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	name := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, name); err != nil {
		t.Fatal(err)
	}
	return name
}

// eventually polls cond until it holds, and fails the test after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("the test ended while waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
