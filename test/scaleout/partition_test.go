//go:build linux

package scaleout_test

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/proctest"
)

// partition is a loopback TCP proxy between one replica and the API
// server that can stop forwarding, as a network partition does: the
// bytes of open connections stop both ways, and new connections are
// accepted and go nowhere, so that the replica's requests hang rather
// than fail. What is sent meanwhile is lost, and a connection that lost
// bytes is closed when the partition heals, as a TLS stream with a gap
// cannot go on; other connections go on. (A partition that TCP outlives
// would deliver the bytes late instead: a write on its way when the
// partition began would land when it heals, which nothing on the
// replica's side can stop.)
type partition struct {
	t        *testing.T
	listener net.Listener
	upstream string // host:port of the API server

	mu    sync.Mutex
	cut   bool
	conns map[*proxied]struct{}
}

// proxied is one connection through the proxy.
type proxied struct {
	client, server net.Conn // server is nil if the partition held it back
	lost           bool     // bytes were lost: it ends when the partition heals
}

func (c *proxied) close() {
	_ = c.client.Close()
	if c.server != nil {
		_ = c.server.Close()
	}
}

// newPartition starts a proxy to cfg's API server and returns it with a
// copy of cfg that goes through it.
func newPartition(t *testing.T, cfg *rest.Config) (*partition, *rest.Config) {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partition{t: t, listener: l, upstream: u.Host, conns: map[*proxied]struct{}{}}
	var running sync.WaitGroup
	running.Go(func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			running.Go(func() { p.serve(client) })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.close()
		}
		p.mu.Unlock()
		running.Wait()
	})
	through := rest.CopyConfig(cfg)
	u.Host = l.Addr().String()
	through.Host = u.String()
	return p, through
}

// stop cuts the replica off.
func (p *partition) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
}

// heal forwards again, and closes the connections that lost bytes.
func (p *partition) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for c := range p.conns {
		if c.lost {
			c.close()
		}
	}
}

// serve proxies one connection until either side ends it.
func (p *partition) serve(client net.Conn) {
	c := &proxied{client: client}
	p.mu.Lock()
	c.lost = p.cut
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close()
	}()
	if c.lost {
		// It goes nowhere: what the client sends is lost.
		_, _ = io.Copy(io.Discard, client)
		return
	}
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		p.t.Logf("the partition's proxy could not reach the API server: %v", err)
		return
	}
	p.mu.Lock()
	c.server = server
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.copy(c, server, client); done <- struct{}{} }()
	go func() { p.copy(c, client, server); done <- struct{}{} }()
	<-done
}

// copy forwards what src sends to dst while the proxy forwards, and
// loses it while it does not.
func (p *partition) copy(c *proxied, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			c.lost = c.lost || p.cut
			forward := !c.lost
			p.mu.Unlock()
			if forward {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// TestAPartitionedReplicaLosesItsSlots cuts one of three replicas off
// from the API server, twice, as a partition does, while it works: each
// time the others hold its slots within LeaseDuration and two
// RetryPeriods, as they do a dead replica's, and converge its gadgets;
// its runs in flight end before they do; and when the partition heals it
// runs no handler until it has joined again. No two replicas ever
// reconcile one gadget at once, and a hand-over runs no handler twice to
// completion on one generation of a gadget.
func TestAPartitionedReplicaLosesItsSlots(t *testing.T) {
	const gadgets = 300
	bin := proctest.Build(t, "./internal/operator")
	env := fsmtest.New(t)
	f := newFleet(t, bin, env.Config(), env.Client, env.Namespace)
	cable, through := newPartition(t, env.Config())
	f.start("a", "b")
	f.startWith("c", proctest.Kubeconfig(t, through))
	f.share("a", "b", "c")
	f.create(gadgets)
	f.converge(1, gadgets)

	for round, target := 1, int32(2); round <= 2; round, target = round+1, target+3 {
		// c is cut off while it works on its gadgets.
		ofC := f.rec.lastBy("c")
		f.bumpUIDs(target, ofC)
		cut := time.Now()
		cable.stop()
		t.Logf("round %d: c cut off at %s with %d runs open", round, cut.Format("15:04:05.000"), len(f.rec.openBy("c")))
		// One gadget of each of c's slots changes again, and only they: a
		// and b converge them once they hold c's slots.
		sample := onePerSlot(ofC)
		f.bumpUIDs(target+1, sample)
		held := f.takenOver("c", sample).Sub(cut)
		// c stays cut off until a and b have converged the gadgets.
		converged, ok := f.convergedBy(target+1, sample, cut.Add(convergeWithin))
		t.Logf("round %d: a and b held c's %d slots %v after the cut (bound: LeaseDuration %v + 2 RetryPeriods %v + %v); a gadget from each: %d converged, the last %v after the cut",
			round, len(sample), held.Round(time.Millisecond), leaseDuration, 2*retryPeriod, takeoverSlack, len(converged), latest(converged).Sub(cut).Round(time.Millisecond))
		if bound := leaseDuration + 2*retryPeriod + takeoverSlack; held > bound {
			t.Errorf("round %d: a and b held every slot of c's %v after the cut, want within %v", round, held.Round(time.Millisecond), bound)
		}
		if !ok {
			t.Errorf("round %d: while c was cut off, a and b converged %d of the %d gadgets from its slots within %v", round, len(converged), len(sample), convergeWithin)
		}
		f.bump(target+1, gadgets)
		f.converge(target+1, gadgets)
		f.rec.check(fmt.Sprintf("round %d, while c was cut off", round))
		f.checkRepeats(fmt.Sprintf("round %d, the partition", round), cut)

		healed := time.Now()
		cable.heal()
		f.share("a", "b", "c")
		rejoined := f.acquired("c")
		t.Logf("round %d: c's partition healed at %s; c took a new Lease %v later", round, healed.Format("15:04:05.000"), rejoined.Sub(healed).Round(time.Millisecond))
		if !rejoined.After(healed) {
			t.Errorf("round %d: c's Lease was acquired at %v, want a new Lease after the partition healed at %v", round, rejoined, healed)
		}
		if early := f.rec.begunBy("c", healed, rejoined); len(early) > 0 {
			t.Errorf("round %d: c ran handlers after its partition healed and before it joined again: %s", round, first(early, 10))
		}
		f.bump(target+2, gadgets)
		all := f.converge(target+2, gadgets)
		t.Logf("round %d: the gadgets converged on their next target %v after the partition healed", round, latest(all).Sub(healed).Round(time.Millisecond))
		f.checkNotes(f.rec.last(0))
		f.rec.check(fmt.Sprintf("round %d, after c's partition healed", round))
		f.checkRepeats(fmt.Sprintf("round %d, the healing", round), healed)
	}
	f.stop("a", "b", "c")
}
