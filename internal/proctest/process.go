//go:build linux

package proctest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Process is a program that a test runs as an OS process of its own. It
// is killed when the test ends, and by the kernel should the test binary
// die. An exit that no signal of the test's caused fails the test, unless
// Options.MayDie allows it.
type Process struct {
	Name string
	t    testing.TB
	cmd  *exec.Cmd
	// exited is closed once the process has exited and its output is read.
	exited chan struct{}
	// signalled is set once the test has sent a signal; died once the
	// process exited without one.
	signalled, died atomic.Bool

	mu  sync.Mutex
	log bytes.Buffer
}

// Options are how Start runs a program.
type Options struct {
	// Lines, when set, receives each line of the process's standard
	// output, which the log then leaves out; the log holds standard error.
	// Without it, the log holds both.
	Lines func(string)
	// MayDie allows the process to die by SIGKILL, its own or another's.
	MayDie bool
	// ShowLog is what a failed test shows of the log; nil shows it whole.
	ShowLog func(log string) string
}

// Start runs the program bin with args as the process name.
func Start(t testing.TB, name, bin string, args []string, o Options) *Process {
	t.Helper()
	p := &Process{Name: name, t: t, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs := writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.log.Write(b)
	})
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	var stdout io.Reader
	if o.Lines != nil {
		p.cmd.Stdout = nil
		var err error
		if stdout, err = p.cmd.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		defer close(p.exited)
		if stdout != nil {
			s := bufio.NewScanner(stdout)
			for s.Scan() {
				o.Lines(s.Text())
			}
		}
		err := p.cmd.Wait()
		switch {
		case p.signalled.Load():
		case !o.MayDie:
			p.died.Store(true)
			t.Errorf("%s exited by itself: %v", name, err)
		case !p.KilledBySIGKILL():
			p.died.Store(true)
			t.Errorf("%s exited, but not by SIGKILL: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			log := p.Log()
			if o.ShowLog != nil {
				log = o.ShowLog(log)
			}
			t.Logf("%s's log:\n%s", name, log)
		}
	})
	return p
}

// Log returns what the process has logged so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Signal sends sig to the process and returns when it was sent: just
// before, so that times measured from it are never too short.
func (p *Process) Signal(sig syscall.Signal) time.Time {
	p.t.Helper()
	p.signalled.Store(true)
	at := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("sending %v to %s: %v", sig, p.Name, err)
	}
	return at
}

// WaitExit waits until the process exits, and returns its exit code (-1
// if a signal ended it).
func (p *Process) WaitExit(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %v", p.Name, within)
		return 0
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Died reports whether the process exited with no signal from the test
// (and, with MayDie, not by SIGKILL).
func (p *Process) Died() bool { return p.died.Load() }

// KilledBySIGKILL reports whether SIGKILL ended the process. Call it once
// it has exited.
func (p *Process) KilledBySIGKILL() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Kill ends the process with SIGKILL if it still runs, stopped or not,
// and waits until it has exited.
func (p *Process) Kill() {
	if p.Exited() {
		return
	}
	p.signalled.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// Kubeconfig writes a kubeconfig with cfg's server and credentials, for
// the processes, and returns its path.
func Kubeconfig(t testing.TB, cfg *rest.Config) string {
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

// Eventually polls cond until it holds, and fails the test with cond's
// last word after within, or at once if the test has failed meanwhile (a
// process died) or ended.
func Eventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		switch {
		case ok:
			return
		case t.Failed():
			t.Fatalf("gave up waiting for %s, as the test has failed: %s", what, why)
		case time.Now().After(deadline):
			t.Fatalf("timed out after %v waiting for %s: %s", within, what, why)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("the test ended while waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
