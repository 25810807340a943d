//go:build linux

package rollout_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/internal/proctest"
)

// process is one operator process.
type process struct {
	*proctest.Process
	t       *testing.T
	name    string
	version int
	metrics string // host:port of its metrics endpoint
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
	p := &process{t: t, name: name, version: version, metrics: proctest.FreeAddr(t)}
	p.Process = proctest.Start(t, name, r.bin, []string{
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
	}, proctest.Options{})
	return p
}

// linesWith counts the lines of the process's log that hold every one of
// the strings.
func (p *process) linesWith(all ...string) int {
	n := 0
	for l := range strings.Lines(p.Log()) {
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
	at := p.Signal(syscall.SIGTERM)
	if code := p.WaitExit(time.Minute); code != 0 {
		p.t.Errorf("%s exited with %d after SIGTERM, want 0", p.name, code)
	}
	return at
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
		return total == sharding.NumSlots && now == previous, fmt.Sprintf("the replicas own %s slots, want %d in all, twice", now, sharding.NumSlots)
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
				slots = sharding.NumSlots
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
