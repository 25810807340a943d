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
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
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
	identity, namespace, lease   string
	leaseDuration, renewDeadline time.Duration
	retryPeriod, tick            time.Duration
	fence                        bool
}

func main() {
	var o options
	flag.StringVar(&o.identity, "identity", "", "this process's name: the Lease's holder identity and the User-Agent")
	flag.StringVar(&o.namespace, "namespace", "", "namespace of the gadgets and the Lease")
	flag.StringVar(&o.lease, "lease", "failover", "name of the Lease")
	flag.DurationVar(&o.leaseDuration, "lease-duration", 4*time.Second, "how long a standby waits before it takes an unrenewed Lease")
	flag.DurationVar(&o.renewDeadline, "renew-deadline", 3*time.Second, "how long the leader tries to renew before it gives up")
	flag.DurationVar(&o.retryPeriod, "retry-period", time.Second, "how often the candidates try the Lease")
	flag.DurationVar(&o.tick, "tick", 500*time.Millisecond, "how often Ticking writes the status")
	flag.BoolVar(&o.fence, "fence", true, "write only while the Lease is known to be held")
	flag.Parse()
	if o.identity == "" || o.namespace == "" {
		fmt.Fprintln(os.Stderr, "operator: -identity and -namespace are required")
		os.Exit(2)
	}
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, o.identity, prefix, args) }, funcr.Options{})
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	out := &reporter{identity: o.identity}

	cfg, err := ctrl.GetConfig() // -kubeconfig, which controller-runtime defines
	if err != nil {
		return err
	}
	cfg.UserAgent = "failover-operator/" + o.identity

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	opts := manager.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Cache:                         cache.Options{DefaultNamespaces: map[string]cache.Config{o.namespace: {}}},
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		LeaderElection:                true,
		LeaderElectionID:              o.lease,
		LeaderElectionNamespace:       o.namespace,
		LeaseDuration:                 &o.leaseDuration,
		RenewDeadline:                 &o.renewDeadline,
		RetryPeriod:                   &o.retryPeriod,
		LeaderElectionReleaseOnCancel: true,
	}
	if o.fence {
		if err := fsm.FenceLeaderElection(cfg, &opts, o.identity); err != nil {
			return err
		}
	} else {
		// The same Lease lock, named by the identity, without the fence.
		leaseCfg := rest.CopyConfig(cfg)
		leaseCfg.Timeout = max(o.renewDeadline/2, time.Second) // as controller-runtime sets it
		leaseClient, err := kubernetes.NewForConfig(leaseCfg)
		if err != nil {
			return err
		}
		opts.LeaderElectionResourceLockInterface = &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: o.namespace, Name: o.lease},
			Client:     leaseClient.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
		}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	g := &gadgets{identity: o.identity, tick: o.tick, out: out}
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
