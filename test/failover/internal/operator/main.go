// Command operator is the operator that package failover runs twice, as
// two processes, to test leader election: one kfsm machine under a
// controller-runtime manager that elects a leader with a Lease.
//
// The machine drives Gadgets in one namespace. A gadget whose spec.mode is
// "action" goes to Working, which starts an asynchronous action that runs
// until its context is cancelled; any other gadget goes to Ticking, which
// increments status.count every -tick. Every status write stamps the
// process's identity in status.note, and every request carries it in its
// User-Agent, so that whoever watches the API server can tell the
// processes apart.
//
// The process prints a line to standard output when the action starts and
// when it is cancelled, as "<RFC 3339 time> <identity> action started" and
// "... action cancelled". It exits with status 0 when SIGTERM or SIGINT
// stops it, releasing the Lease, and with status 1 when it loses the
// Lease.
//
// With -fence (the default) the process writes to the API server only
// while it knows it holds the Lease: fsm.FenceLeaderElection.
package main

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
	"github.com/kfsm/kfsm/test/internal/testoperator"
)

// The machine's states.
const (
	Start   fsm.State = "Start"
	Ticking fsm.State = "Ticking"
	Working fsm.State = "Working"
)

// ModeAction is the spec.mode of a gadget that runs the long action.
const ModeAction = "action"

type options struct {
	*testoperator.Process
	lease string
	tick  time.Duration
	fence bool
}

func main() {
	o := options{Process: testoperator.Flags()}
	flag.StringVar(&o.lease, "lease", "failover", "name of the Lease")
	flag.DurationVar(&o.tick, "tick", 500*time.Millisecond, "how often Ticking writes the status")
	flag.BoolVar(&o.fence, "fence", true, "write only while the Lease is known to be held")
	flag.Parse()
	if o.Identity == "" || o.Namespace == "" {
		testoperator.Usage("-identity and -namespace are required")
	}
	testoperator.Main(func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o options) error {
	out := &reporter{identity: o.Identity}
	cfg, opts, err := o.Setup("failover")
	if err != nil {
		return err
	}
	if err := o.Leader(cfg, &opts, o.lease, o.fence); err != nil {
		return err
	}
	if !o.fence {
		// The same Lease lock, named by the identity, without the fence.
		leaseCfg := rest.CopyConfig(cfg)
		leaseCfg.Timeout = max(o.RenewDeadline/2, time.Second) // as controller-runtime sets it
		leaseClient, err := kubernetes.NewForConfig(leaseCfg)
		if err != nil {
			return err
		}
		opts.LeaderElectionResourceLockInterface = &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.lease},
			Client:     leaseClient.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
		}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	g := &gadgets{identity: o.Identity, tick: o.tick, out: out}
	m := fsm.New[*v1alpha1.Gadget]("failover", fsm.Lifecycle).
		Initial(Start).
		State(Start, g.start, fsm.To(Ticking, Working)).
		State(Ticking, g.ticking, fsm.Final()).
		State(Working, g.working, fsm.Final()).
		PublishGraph(false)
	if err := m.SetupWithManager(mgr); err != nil {
		return err
	}
	err = mgr.Start(ctx)
	// An action learns of the stop from its context; wait until it has
	// said so, briefly, since nothing else waits for it.
	for deadline := time.Now().Add(5 * time.Second); g.running.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// gadgets holds the machine's handlers.
type gadgets struct {
	identity string
	tick     time.Duration
	out      *reporter
	running  atomic.Int32 // actions running now
}

func (g *gadgets) start(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
	if r.Object.Spec.Mode == ModeAction {
		return fsm.Next(Working)
	}
	return fsm.Next(Ticking)
}

// ticking writes the status every tick: the leader's heartbeat, as the
// API server sees it.
func (g *gadgets) ticking(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
	r.Object.Status.Count++
	r.Object.Status.Note = g.identity
	return fsm.Wait(g.tick, "Ticking")
}

// working keeps the long action running.
func (g *gadgets) working(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
	r.Object.Status.Note = g.identity
	// Idempotent: the replica that takes over runs it again, from where the
	// record says.
	if a := r.Action("long", g.long, fsm.Idempotent()); a.State == fsm.ActionFailed {
		return fsm.Fail(a.Err)
	}
	return fsm.Wait(0, "Working")
}

// long runs until its context is cancelled, and says when it starts and
// when it is cancelled.
func (g *gadgets) long(ctx context.Context, _ *fsm.ActionRun) error {
	g.running.Add(1)
	defer g.running.Add(-1)
	g.out.say("action started")
	<-ctx.Done()
	g.out.say("action cancelled")
	return ctx.Err()
}

// reporter prints the lines that a test waits for.
type reporter struct {
	identity string
	mu       sync.Mutex
}

func (r *reporter) say(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Printf("%s %s %s\n", time.Now().Format(time.RFC3339Nano), r.identity, what)
}
