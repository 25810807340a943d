//go:build linux

package failover_test

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
// records their writes and their requests of the Lease, with what the
// failover tests ask of it.
type recorder struct {
	*apirecord.Recorder
	t *testing.T
}

type call = apirecord.Call

func newRecorder(t *testing.T, cfg *rest.Config) *recorder {
	return &recorder{Recorder: apirecord.New(t, cfg), t: t}
}

// kubeconfig starts the proxy of process and returns its kubeconfig.
func (r *recorder) kubeconfig(process string) string { return r.Kubeconfig(process, 0) }

// leaseWritten reports whether c is a write of the Lease that the API
// server accepted, with holder.
func leaseWritten(c *call, holder string) bool {
	return c.Write() && c.OK() && c.Lease != "" && c.Holder == holder
}

// first waits until a call matches, and returns it.
func (r *recorder) first(what string, within time.Duration, match func(c *call) bool) call {
	r.t.Helper()
	var found []call
	eventually(r.t, within, what, func() bool {
		found = r.All(match)
		return len(found) > 0
	})
	return found[0]
}

// acquired is the first write with which process took the Lease, at or
// after since: a standby writes to the Lease only to take it.
func (r *recorder) acquired(process string, since time.Time, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to take the Lease", within, func(c *call) bool {
		return c.Process == process && !c.At.Before(since) && leaseWritten(c, process)
	})
}

// released is the write with which process gave the Lease up.
func (r *recorder) released(process string, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to release the Lease", within, func(c *call) bool {
		return c.Process == process && leaseWritten(c, "")
	})
}

// reconciled is the first status write of the ticker gadget by process,
// at or after since, that the API server accepted.
func (r *recorder) reconciled(process string, since time.Time, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to write the ticker's status", within, func(c *call) bool {
		return c.Process == process && !c.At.Before(since) && c.OK() && c.Method == http.MethodPatch &&
			strings.HasSuffix(c.Path, "/gadgets/ticker/status")
	})
}

// renewed is the first write with which process, holding the Lease,
// renewed it after since.
func (r *recorder) renewed(process string, since time.Time, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to renew the Lease", within, func(c *call) bool {
		return c.Process == process && c.At.After(since) && leaseWritten(c, process)
	})
}

// lastRenewal is the last write with which process acquired or renewed
// the Lease before t.
func (r *recorder) lastRenewal(process string, t time.Time) call {
	r.t.Helper()
	renewals := r.All(func(c *call) bool { return c.Process == process && c.At.Before(t) && leaseWritten(c, process) })
	if len(renewals) == 0 {
		r.t.Fatalf("%s never held the Lease before %s", process, t.Format("15:04:05.000"))
	}
	return renewals[len(renewals)-1]
}

// readLease is the first time that process read the Lease after since.
// Its first read means that its manager runs with its caches synced, as
// controller-runtime elects only then.
func (r *recorder) readLease(process string, since time.Time, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to read the Lease", within, func(c *call) bool {
		return c.Process == process && c.At.After(since) && c.Method == http.MethodGet && c.Lease != ""
	})
}

// writesAfter lists the writes of process that arrived after t.
func (r *recorder) writesAfter(process string, t time.Time) []call {
	return r.All(func(c *call) bool { return c.Process == process && c.Write() && c.At.After(t) })
}

// dump logs every call, to read when a test fails.
func (r *recorder) dump() {
	r.t.Helper()
	var b strings.Builder
	for _, c := range r.All(func(*call) bool { return true }) {
		fmt.Fprintln(&b, c.String())
	}
	r.t.Logf("the recorder's log:\n%s", b.String())
}

// eventually polls cond until it holds, and fails the test after within,
// or at once if the test has failed meanwhile (a process died).
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	proctest.Eventually(t, within, what, func() (bool, string) { return cond(), "" })
}
