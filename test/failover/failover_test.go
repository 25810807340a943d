//go:build linux

package failover_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/proctest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// The election timing the operators run with.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = time.Second
	// tick is how often the leader reconciles the ticker gadget, and so
	// the longest a reconcile can be waited for.
	tick = 500 * time.Millisecond
	// slack covers process scheduling on a loaded machine: the race
	// detector, and the processes of the other scenarios, which run at the
	// same time.
	slack = time.Second
	// runs is how often the scenarios that measure a handover run.
	runs = 3
)

// What follows from the timing.
var (
	// poll is the longest a candidate waits between two tries of the
	// Lease: client-go jitters RetryPeriod by up to JitterFactor.
	poll = time.Duration(float64(retryPeriod) * (1 + leaderelection.JitterFactor))
	// killBound is the longest from a SIGKILL of the leader to the
	// standby's first write. The standby sees the leader's last renewal at
	// its next try, at most a poll after the kill; it takes the Lease at
	// the first try LeaseDuration after that, and its first reconcile
	// writes within a tick.
	killBound = leaseDuration + 2*poll + tick + slack
	// termBound is the same after a SIGTERM, when the leader releases the
	// Lease at once: the standby's next try takes it.
	termBound = poll + tick + slack
)

// timings collects the handover times of the runs, to report them
// together.
type timings struct {
	mu   sync.Mutex
	runs map[string][]time.Duration
}

func (m *timings) add(what string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs == nil {
		m.runs = map[string][]time.Duration{}
	}
	m.runs[what] = append(m.runs[what], d)
}

func (m *timings) report(t *testing.T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	for _, what := range slices.Sorted(maps.Keys(m.runs)) {
		ds := slices.Clone(m.runs[what])
		slices.Sort(ds)
		var all []string
		for _, d := range m.runs[what] {
			all = append(all, d.Round(time.Millisecond).String())
		}
		fmt.Fprintf(&b, "\n  %-42s median %-8v range %v–%v (runs: %s)", what, ds[len(ds)/2].Round(time.Millisecond),
			ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), strings.Join(all, ", "))
	}
	t.Logf("handover times, from the signal:%s", b.String())
}

// TestFailover runs the scenarios at the same time, each with two
// operator processes, a Lease and a namespace of its own.
func TestFailover(t *testing.T) {
	bin := proctest.Build(t, "./internal/operator")
	if termBound >= leaseDuration {
		t.Fatalf("the SIGTERM bound %v is not below LeaseDuration %v: the test could not tell a release from an expiry", termBound, leaseDuration)
	}
	var m timings
	t.Run("Scenarios", func(t *testing.T) {
		for i := range runs {
			t.Run(fmt.Sprintf("KillHandsOverWithinTheLease/%d", i+1), func(t *testing.T) {
				t.Parallel()
				testKill(t, bin, &m)
			})
			t.Run(fmt.Sprintf("TermReleasesTheLeaseAndCancelsActions/%d", i+1), func(t *testing.T) {
				t.Parallel()
				testTerm(t, bin, &m)
			})
		}
		t.Run("StoppedLeaderWritesNothingOnceTheLeaseMoved", func(t *testing.T) {
			t.Parallel()
			testStop(t, bin, &m, true)
		})
		t.Run("UnfencedStoppedLeaderWritesOnceTheLeaseMoved", func(t *testing.T) {
			t.Parallel()
			testStop(t, bin, &m, false)
		})
	})
	m.report(t)
}

// pair is a scenario's cluster side: process a leads, b stands by.
type pair struct {
	env  *fsmtest.Env
	rec  *recorder
	a, b *process
}

// startPair creates the ticker gadget (and with action, a gadget that runs
// the long action), starts a, waits until it leads and has written, then
// starts b and waits until b has seen a renew the Lease: the steady state
// of a leader and a standby. It returns at a random moment of that state.
func startPair(t *testing.T, bin string, fenced, action bool) *pair {
	t.Helper()
	env := fsmtest.New(t)
	rec := newRecorder(t, env.Config())
	t.Cleanup(func() {
		if t.Failed() {
			rec.dump()
		}
	})
	env.Create(&v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "ticker"}})
	if action {
		env.Create(&v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "job"}, Spec: v1alpha1.GadgetSpec{Mode: "action"}})
	}
	p := &pair{env: env, rec: rec}
	p.a = startOperator(t, bin, rec, "a", env.Namespace, fenced)
	rec.acquired("a", time.Time{}, time.Minute)
	rec.reconciled("a", time.Time{}, 30*time.Second)
	if action {
		p.a.waitSaid("action started", 30*time.Second)
	}
	p.b = startOperator(t, bin, rec, "b", env.Namespace, fenced)
	first := rec.readLease("b", time.Time{}, time.Minute)
	renewed := rec.renewed("a", first.At, 2*poll+slack)
	rec.readLease("b", renewed.At, 2*poll+slack)
	// The signal comes at any point of the cycles of renewals and tries.
	time.Sleep(rand.N(poll))
	return p
}

// ticker reads the ticker gadget.
func (p *pair) ticker() *v1alpha1.Gadget {
	p.env.T.Helper()
	var g v1alpha1.Gadget
	if err := p.env.Client.Get(p.env.T.Context(), client.ObjectKey{Namespace: p.env.Namespace, Name: "ticker"}, &g); err != nil {
		p.env.T.Fatal(err)
	}
	return &g
}

// holder reads who holds the Lease.
func (p *pair) holder() string {
	p.env.T.Helper()
	var l coordinationv1.Lease
	if err := p.env.Client.Get(p.env.T.Context(), client.ObjectKey{Namespace: p.env.Namespace, Name: "failover"}, &l); err != nil {
		p.env.T.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// tookExpiredLease fails the test if b took the Lease sooner than
// LeaseDuration after a last renewed it: b cannot have seen the renewal
// before it reached the API server, and it waits LeaseDuration from then.
func (p *pair) tookExpiredLease(took call) {
	p.env.T.Helper()
	last := p.rec.lastRenewal("a", took.At)
	if d := took.At.Sub(last.At); d < leaseDuration {
		p.env.T.Errorf("b took the Lease %v after a last renewed it, before it expired (LeaseDuration %v)", d, leaseDuration)
	}
}

// testKill: SIGKILL the leader, and the standby takes the Lease once it
// expires and writes within one reconcile.
func testKill(t *testing.T, bin string, m *timings) {
	p := startPair(t, bin, true, false)
	before := p.ticker().Status.Count

	killed := p.a.Signal(syscall.SIGKILL)
	if _, code := p.a.waitExit(10 * time.Second); code != -1 {
		t.Errorf("a exited with %d after SIGKILL, want death by the signal", code)
	}
	took := p.rec.acquired("b", killed, 2*killBound)
	wrote := p.rec.reconciled("b", took.At, 2*killBound)

	election, handover := took.At.Sub(killed), wrote.At.Sub(killed)
	m.add("SIGKILL: b takes the Lease", election)
	m.add("SIGKILL: b's first write", handover)
	t.Logf("SIGKILL: b took the Lease after %v and wrote after %v (bound %v)", election.Round(time.Millisecond), handover.Round(time.Millisecond), killBound)
	if handover > killBound {
		t.Errorf("b wrote %v after the SIGKILL, want at most LeaseDuration %v + 2 × a poll of %v + a tick %v + slack %v = %v",
			handover, leaseDuration, poll, tick, slack, killBound)
	}
	p.tookExpiredLease(took)
	if g := p.ticker(); g.Status.Note != "b" || g.Status.Count <= before {
		t.Errorf("the ticker's status is note %q, count %d; want b's, past a's count %d", g.Status.Note, g.Status.Count, before)
	}
	p.rec.CheckAgents("failover-operator")
}

// testStop: a leader frozen with SIGSTOP past its Lease, and woken once
// the standby leads, writes nothing more and exits. Unfenced, the same
// operator does write: the recorder would see it.
func testStop(t *testing.T, bin string, m *timings, fenced bool) {
	p := startPair(t, bin, fenced, false)

	stopped := p.a.Signal(syscall.SIGSTOP)
	took := p.rec.acquired("b", stopped, 2*killBound)
	wrote := p.rec.reconciled("b", took.At, 2*killBound)
	p.tookExpiredLease(took)

	resumed := p.a.Signal(syscall.SIGCONT)
	exited, code := p.a.waitExit(renewDeadline + 2*poll + 10*time.Second)
	if code != 1 {
		t.Errorf("a exited with %d once it lost the Lease, want 1", code)
	}
	// Fenced, a gives up RenewDeadline after it wakes. Unfenced, its
	// controllers write on at once, and on a loaded machine its elector's
	// first try came a second after it woke (it exited 4.02 s after
	// SIGCONT): the bound allows it a poll.
	bound, why := renewDeadline+slack, "RenewDeadline + slack"
	if !fenced {
		bound, why = renewDeadline+poll+slack, "RenewDeadline + a poll + slack"
	}
	if d := exited.Sub(resumed); d > bound {
		t.Errorf("a exited %v after SIGCONT, want at most %s = %v", d, why, bound)
	}
	run := "SIGSTOP"
	if !fenced {
		run = "SIGSTOP, unfenced"
	}
	m.add(run+": b's first write", wrote.At.Sub(stopped))
	m.add(run+": a exits after SIGCONT", exited.Sub(resumed))
	t.Logf("%s: b took the Lease %v after a stopped and wrote after %v; a exited %v after SIGCONT", run,
		took.At.Sub(stopped).Round(time.Millisecond), wrote.At.Sub(stopped).Round(time.Millisecond), exited.Sub(resumed).Round(time.Millisecond))

	late := p.rec.writesAfter("a", took.At)
	if !fenced {
		// Without the fence, a writes until its elector gives up, which a
		// leader that renewed at its first try does only RenewDeadline
		// after it wakes: what the fenced run must not do, and the proof
		// that the recorder sees it.
		if len(late) == 0 {
			t.Errorf("unfenced, a wrote nothing after b took the Lease; the recorder should have seen its writes")
		}
		t.Logf("unfenced, a made %d writes after b took the Lease, such as %s", len(late), describe(late, 3))
		return
	}
	if len(late) > 0 {
		t.Errorf("a made %d writes after b took the Lease at %s: %s", len(late), took.At.Format("15:04:05.000"), describe(late, 10))
	}
	if h := p.holder(); h != "b" {
		t.Errorf("after a exited, the Lease is held by %q, want b", h)
	}
	p.rec.reconciled("b", exited, 2*tick+slack) // b goes on
	p.rec.CheckAgents("failover-operator")
}

// testTerm: SIGTERM makes the leader cancel its action, release the Lease
// at once and exit; the standby takes over well before LeaseDuration.
func testTerm(t *testing.T, bin string, m *timings) {
	p := startPair(t, bin, true, true)

	termed := p.a.Signal(syscall.SIGTERM)
	if _, code := p.a.waitExit(30 * time.Second); code != 0 {
		t.Errorf("a exited with %d after SIGTERM, want 0", code)
	}
	released := p.rec.released("a", time.Second)
	took := p.rec.acquired("b", termed, 2*killBound)
	wrote := p.rec.reconciled("b", took.At, 2*killBound)

	release, handover := released.At.Sub(termed), wrote.At.Sub(termed)
	m.add("SIGTERM: a releases the Lease", release)
	m.add("SIGTERM: b's first write", handover)
	t.Logf("SIGTERM: a released the Lease after %v; b took it after %v and wrote after %v (bound %v)",
		release.Round(time.Millisecond), took.At.Sub(termed).Round(time.Millisecond), handover.Round(time.Millisecond), termBound)
	if release > slack {
		t.Errorf("a released the Lease %v after SIGTERM, want at once (within %v)", release, slack)
	}
	if handover > termBound {
		t.Errorf("b wrote %v after SIGTERM, want at most a poll of %v + a tick %v + slack %v = %v, below LeaseDuration %v",
			handover, poll, tick, slack, termBound, leaseDuration)
	}
	if took.Transitions != released.Transitions+1 {
		t.Errorf("b took the Lease with %d transitions, a released it with %d; want one more", took.Transitions, released.Transitions)
	}
	if late := p.rec.writesAfter("a", released.At); len(late) > 0 {
		t.Errorf("a made %d writes after it released the Lease: %s", len(late), describe(late, 10))
	}

	cancelled, ok := p.a.said("action cancelled")
	if !ok {
		t.Fatalf("a did not say that its action was cancelled")
	}
	restarted := p.b.waitSaid("action started", 2*killBound)
	if !cancelled.at.Before(restarted.at) {
		t.Errorf("b started the action at %s, before a's was cancelled at %s", restarted.at.Format(time.StampMicro), cancelled.at.Format(time.StampMicro))
	}
	p.rec.CheckAgents("failover-operator")
}

// describe lists up to n calls.
func describe(calls []call, n int) string {
	var s []string
	for i := range min(n, len(calls)) {
		s = append(s, calls[i].String())
	}
	if len(calls) > n {
		s = append(s, fmt.Sprintf("and %d more", len(calls)-n))
	}
	return strings.Join(s, "; ")
}
