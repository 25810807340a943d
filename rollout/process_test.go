//go:build linux

package rollout_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kfsm/kfsm/fsm"
)

// process is one operator process.
type process struct {
	t       *testing.T
	name    string
	version int
	metrics string // host:port of its metrics endpoint
	cmd     *exec.Cmd
	exited  chan struct{} // closed once it has exited
	// signalled is set once the test has sent a signal: until then, an
	// exit is a failure.
	signalled atomic.Bool

	mu   sync.Mutex
	logs bytes.Buffer
}

// run is how a scenario starts a process.
type run struct {
	bin, namespace, mode string
	rec                  *recorder
	// ignoreNewer makes the processes of version 1 blind to the version
	// of the graph that wrote a gadget: the negative control.
	ignoreNewer bool
}

// start starts the operator as the named process of version, with its
// own proxy of the recorder. The process is killed when the test ends,
// and its log shown if the test failed.
func (r run) start(t *testing.T, name string, version int) *process {
	t.Helper()
	return r.startWith(t, name, version, r.rec.kubeconfig(name, version))
}

// startWith is start with the kubeconfig given.
func (r run) startWith(t *testing.T, name string, version int, kubeconfig string) *process {
	t.Helper()
	p := &process{t: t, name: name, version: version, metrics: freeAddr(t), exited: make(chan struct{})}
	p.cmd = exec.Command(r.bin,
		"-kubeconfig", kubeconfig,
		"-identity", name,
		"-namespace", r.namespace,
		"-mode", r.mode,
		"-version", strconv.Itoa(version),
		"-metrics-addr", p.metrics,
		"-lease-duration", leaseDuration.String(),
		"-renew-deadline", renewDeadline.String(),
		"-retry-period", retryPeriod.String(),
		"-tick", tick.String(),
		fmt.Sprintf("-ignore-newer=%t", r.ignoreNewer && version == 1),
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
			t.Errorf("%s exited by itself: %v", name, err)
		}
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, p.log())
		}
	})
	return p
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

// log returns the process's log so far.
func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// linesWith counts the lines of the process's log that hold every one of
// the strings.
func (p *process) linesWith(all ...string) int {
	n := 0
	for l := range strings.Lines(p.log()) {
		found := true
		for _, s := range all {
			found = found && strings.Contains(l, s)
		}
		if found {
			n++
		}
	}
	return n
}

// stop sends SIGTERM to the process, waits until it exits and fails the
// test unless it exited with status 0.
func (p *process) stop() time.Time {
	p.t.Helper()
	p.signalled.Store(true)
	at := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("sending SIGTERM to %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			p.t.Errorf("%s exited with %d after SIGTERM, want 0", p.name, code)
		}
	case <-time.After(time.Minute):
		p.t.Fatalf("%s did not exit within a minute of SIGTERM", p.name)
	}
	return at
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

// metric reads the process's metrics endpoint and sums the samples of
// the named metric whose labels include those given, as name and value
// pairs.
func (p *process) metric(name string, labels ...string) (float64, error) {
	ctx, cancel := context.WithTimeout(p.t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s's metrics endpoint answered %s", p.name, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s's metrics: %w", p.name, err)
	}
	var sum float64
	for _, s := range families[name].GetMetric() {
		matches := true
		for i := 0; i+1 < len(labels); i += 2 {
			has := false
			for _, l := range s.GetLabel() {
				has = has || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			matches = matches && has
		}
		if matches {
			sum += s.GetGauge().GetValue() + s.GetCounter().GetValue() + s.GetUntyped().GetValue()
		}
	}
	return sum, nil
}

// share waits until the processes share the slots: each counts them all
// as members and owns some, and together they own all of them, the same
// at two looks in a row.
func (s *scenario) share(ps ...*process) {
	s.t.Helper()
	var previous, now string
	eventually(s.t, within, "the replicas to share the slots", func() (bool, string) {
		var owned []string
		total := 0
		for _, p := range ps {
			members, err := p.metric("kfsm_shard_members", "shards", lease)
			if err != nil {
				return false, err.Error()
			}
			slots, err := p.metric("kfsm_shard_slots", "shards", lease)
			if err != nil {
				return false, err.Error()
			}
			if int(members) != len(ps) || slots == 0 {
				return false, fmt.Sprintf("%s counts %v members and owns %v slots", p.name, members, slots)
			}
			total += int(slots)
			owned = append(owned, fmt.Sprintf("%s %d", p.name, int(slots)))
		}
		previous, now = now, strings.Join(owned, ", ")
		return total == fsm.NumSlots && now == previous, fmt.Sprintf("the replicas own %s slots, want %d in all, twice", now, fsm.NumSlots)
	})
	s.t.Logf("the slots are shared: %s", now)
}

// holdAll waits until newest holds every slot and each of aside none,
// each counting them all as members and aside as standing aside for a
// newer graph version, the same at two looks in a row.
func (s *scenario) holdAll(newest *process, aside ...*process) {
	s.t.Helper()
	var previous, now string
	eventually(s.t, within, newest.name+" to hold every slot", func() (bool, string) {
		var seen []string
		for _, p := range append([]*process{newest}, aside...) {
			var values []float64
			for _, name := range []string{"kfsm_shard_members", "kfsm_shard_members_standing_aside", "kfsm_shard_slots"} {
				v, err := p.metric(name, "shards", lease)
				if err != nil {
					return false, err.Error()
				}
				values = append(values, v)
			}
			seen = append(seen, fmt.Sprintf("%s: %v members, %v standing aside, %v slots", p.name, values[0], values[1], values[2]))
			slots := 0
			if p == newest {
				slots = fsm.NumSlots
			}
			if int(values[0]) != 1+len(aside) || int(values[1]) != len(aside) || int(values[2]) != slots {
				return false, strings.Join(seen, "; ")
			}
		}
		previous, now = now, strings.Join(seen, "; ")
		return now == previous, now
	})
	s.t.Logf("%s holds every slot: %s", newest.name, now)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
