//go:build linux

package rollout_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kfsm/kfsm/internal/proctest"
	"github.com/kfsm/kfsm/test/internal/apirecord"
)

// recorder is the proxy between the operators and the API server that
// records their writes, with the version of the graph that each process
// runs, and what the rollout tests ask of it.
type recorder struct {
	*apirecord.Recorder
	t *testing.T
}

type call = apirecord.Call

func newRecorder(t *testing.T, cfg *rest.Config) *recorder {
	return &recorder{Recorder: apirecord.New(t, cfg), t: t}
}

// kubeconfig starts the proxy of process, which runs version of the
// graph, and returns its kubeconfig.
func (r *recorder) kubeconfig(process string, version int) string {
	return r.Kubeconfig(process, version)
}

// gadgetWrites lists the writes of gadgets by process ("" for any) that
// arrived after since.
func (r *recorder) gadgetWrites(process string, since time.Time) []call {
	return r.All(func(c *call) bool {
		return c.Gadget != "" && (process == "" || c.Process == process) && c.At.After(since)
	})
}

// migrations returns, of each gadget, the first write of version 2 that
// the API server accepted: the migration, which recorded graph version 2.
func (r *recorder) migrations() map[string]call {
	out := map[string]call{}
	for _, c := range r.All(func(c *call) bool { return c.Gadget != "" && c.Version >= 2 && c.OK() && c.GraphVersion >= 2 }) {
		if m, ok := out[c.Gadget]; !ok || c.RV < m.RV {
			out[c.Gadget] = c
		}
	}
	return out
}

// olderAfterNewer describes every write of a process of version 1 to a
// gadget after a process of version 2 wrote graph version 2 into it: one
// that reached the proxy after the API server had answered that write,
// or that the API server accepted after it, by their resourceVersions.
func (r *recorder) olderAfterNewer() []string {
	migrated := r.migrations()
	var out []string
	for _, c := range r.All(func(c *call) bool { return c.Gadget != "" && c.Version == 1 }) {
		m, ok := migrated[c.Gadget]
		if ok && (c.At.After(m.Answered) || c.OK() && c.RV > m.RV) {
			out = append(out, fmt.Sprintf("%s, after %s", &c, &m))
		}
	}
	return out
}

// told counts, of each gadget, the writes of process after since to the
// events with reason: their creations, and the patches of those events,
// which the event recorder sends when the same event recurs.
func (r *recorder) told(process, reason string, since time.Time) map[string]int {
	calls := r.All(func(c *call) bool { return c.Process == process && c.Event != "" && c.At.After(since) })
	regards := map[string]string{} // event → gadget
	out := map[string]int{}
	for _, c := range calls {
		if c.Reason == reason {
			regards[c.Event] = c.Regarding
		}
		if g, ok := regards[c.Event]; ok {
			out[g]++
		}
	}
	return out
}

// acquired is the first write with which process took the machine's Lease,
// at or after since.
func (r *recorder) acquired(process string, since time.Time) call {
	r.t.Helper()
	var found []call
	eventually(r.t, within, process+" to take the Lease "+lease, func() (bool, string) {
		found = r.All(func(c *call) bool {
			return c.Process == process && c.Write() && c.Lease == lease && c.Holder == process && !c.At.Before(since)
		})
		return len(found) > 0, ""
	})
	return found[0]
}

// readLease waits until process reads the Lease named lease after
// since. Its first read means that its manager runs with its caches
// synced, as controller-runtime elects only then.
func (r *recorder) readLease(process, lease string, since time.Time, within time.Duration) {
	r.t.Helper()
	eventually(r.t, within, process+" to read the Lease "+lease, func() (bool, string) {
		return len(r.All(func(c *call) bool {
			return c.Process == process && c.Method == http.MethodGet && c.Lease == lease && c.At.After(since)
		})) > 0, ""
	})
}

// dump logs the calls, to read when a test fails, but for the heartbeats:
// the writes of gadgets that changed neither their state nor their graph
// version.
func (r *recorder) dump() {
	r.t.Helper()
	var b strings.Builder
	last := map[string]call{}
	skipped := 0
	for _, c := range r.All(func(*call) bool { return true }) {
		if p, ok := last[c.Gadget]; ok && c.OK() && c.State == p.State && c.GraphVersion == p.GraphVersion {
			skipped++
			continue
		}
		if c.Gadget != "" && c.OK() {
			last[c.Gadget] = c
		}
		fmt.Fprintln(&b, c.String())
	}
	r.t.Logf("the recorder's log, without %d heartbeats:\n%s", skipped, b.String())
}

// eventually polls cond until it holds, and fails the test with cond's
// last word after within, or at once if the test has failed meanwhile (a
// process died).
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	proctest.Eventually(t, within, what, cond)
}
