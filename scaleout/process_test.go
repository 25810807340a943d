//go:build linux

package scaleout_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

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

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
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

// process is one operator process.
type process struct {
	t       *testing.T
	name    string
	metrics string // host:port of its metrics endpoint
	cmd     *exec.Cmd
	exited  chan struct{} // closed once it has exited
	// signalled is set once the test has sent a signal: until then, an
	// exit is a failure, and died is set.
	signalled, died atomic.Bool

	mu   sync.Mutex
	logs bytes.Buffer
}

// startOperator starts the operator as the named replica. The process is
// killed when the test ends, and the end of its log shown if the test
// failed.
func startOperator(t *testing.T, bin, kubeconfig, namespace, name, recorder string) *process {
	t.Helper()
	p := &process{t: t, name: name, metrics: freeAddr(t), exited: make(chan struct{})}
	p.cmd = exec.Command(bin,
		"-kubeconfig", kubeconfig,
		"-identity", name,
		"-namespace", namespace,
		"-recorder", recorder,
		"-metrics-addr", p.metrics,
		"-lease-duration", leaseDuration.String(),
		"-renew-deadline", renewDeadline.String(),
		"-retry-period", retryPeriod.String(),
		"-work", work.String(),
	)
	// Should the test binary die, the kernel kills the operator too.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.logs.Write(b)
	})
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		defer close(p.exited)
		err := p.cmd.Wait()
		if !p.signalled.Load() {
			p.died.Store(true)
			t.Errorf("%s exited by itself: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s's log, its last %d lines but the transitions of single gadgets:\n%s", name, logTail, p.tail(logTail))
		}
	})
	return p
}

// logTail is how many lines of a replica's log a failed test shows.
const logTail = 150

// log returns the process's log so far.
func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// tail returns the last n lines of the process's log, leaving out the
// transitions of single gadgets, which the recorder has.
func (p *process) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lines []string
	for l := range strings.Lines(p.logs.String()) {
		if !strings.Contains(l, `"msg"="transition"`) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "")
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

// waitExit waits until the process exits and returns its exit code (-1
// if a signal killed it).
func (p *process) waitExit(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %v", p.name, within)
		return 0
	}
}

// kill ends the process if it still runs, and waits for it.
func (p *process) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.signalled.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// scrape reads the process's metrics.
func (p *process) scrape(ctx context.Context) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s's metrics endpoint answered %s", p.name, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s's metrics: %w", p.name, err)
	}
	return families, nil
}

// metrics is one scrape of a process's metrics endpoint.
type metrics map[string]*dto.MetricFamily

// value sums the samples of the named metric whose labels include those
// given, as name and value pairs: zero if there are none.
func (m metrics) value(name string, labels ...string) float64 {
	var sum float64
	for _, s := range m[name].GetMetric() {
		if hasLabels(s, labels) {
			sum += s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
		}
	}
	return sum
}

// series lists the label sets and values of the named metric's samples.
func (m metrics) series(name string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m[name].GetMetric() {
		var labels []string
		for _, l := range s.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		v := s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
		out["{"+strings.Join(labels, ",")+"}"] = v
	}
	return out
}

func hasLabels(s *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
