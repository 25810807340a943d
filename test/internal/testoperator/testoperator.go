// Package testoperator is what the operator processes of kfsm's
// process-level suites (effects, failover, rollout, scaleout) share: the
// flags that name a process and time its Leases, its logger, its client's
// configuration and scheme, a manager's options for one namespace, and
// leader election or sharding on top of them. Each suite's command keeps
// only its machine and the flags of its own.
package testoperator

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// Process is one operator process: who it is, where it works and how it
// times its Lease, as its flags say.
type Process struct {
	Identity, Namespace                       string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsAddr is the host:port of the metrics endpoint; "0" serves
	// none.
	MetricsAddr string
}

// Flags defines -identity, -namespace, -lease-duration, -renew-deadline
// and -retry-period on the command line, and returns the process they
// describe once flag.Parse has run. Its metrics endpoint is "0" unless
// the command defines a flag for it.
func Flags() *Process {
	p := &Process{MetricsAddr: "0"}
	flag.StringVar(&p.Identity, "identity", "", "this process's name: its Lease's holder and its User-Agent")
	flag.StringVar(&p.Namespace, "namespace", "", "namespace of the gadgets and the Leases")
	flag.DurationVar(&p.LeaseDuration, "lease-duration", 4*time.Second, "how long a Lease outlives its last renewal before another process takes it")
	flag.DurationVar(&p.RenewDeadline, "renew-deadline", 3*time.Second, "how long a holder tries to renew before it gives its Lease up")
	flag.DurationVar(&p.RetryPeriod, "retry-period", time.Second, "how often a process tries and renews its Lease")
	return p
}

// Usage says what is wrong with the command line and exits with status 2.
func Usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "operator: "+format+"\n", args...)
	os.Exit(2)
}

// Main runs run until SIGTERM or SIGINT cancels its context, and exits
// with status 1 when it returns an error.
func Main(run func(context.Context) error) {
	if err := run(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

// Setup makes the process's logger, which prefixes each line with its
// identity, its client's configuration (-kubeconfig, which
// controller-runtime defines, and the User-Agent
// "<suite>-operator/<identity>") and a manager's options: client-go's and
// the test API's types, a cache of the process's namespace, and metrics
// at MetricsAddr.
func (p *Process) Setup(suite string) (*rest.Config, manager.Options, error) {
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, p.Identity, prefix, args) },
		funcr.Options{LogTimestamp: true, TimestampFormat: "15:04:05.000"})
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, manager.Options{}, err
	}
	cfg.UserAgent = suite + "-operator/" + p.Identity
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, manager.Options{}, err
		}
	}
	return cfg, manager.Options{
		Scheme:  scheme,
		Logger:  log,
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{p.Namespace: {}}},
		Metrics: metricsserver.Options{BindAddress: p.MetricsAddr},
	}, nil
}

// Leader makes opts elect a leader on the Lease name in the process's
// namespace, with its timing, released when the manager stops; with
// fence, behind kfsm's fence (fsm.FenceLeaderElection).
func (p *Process) Leader(cfg *rest.Config, opts *manager.Options, name string, fence bool) error {
	opts.LeaderElection, opts.LeaderElectionID, opts.LeaderElectionNamespace = true, name, p.Namespace
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &p.LeaseDuration, &p.RenewDeadline, &p.RetryPeriod
	opts.LeaderElectionReleaseOnCancel = true
	if !fence {
		return nil
	}
	return fsm.FenceLeaderElection(cfg, opts, p.Identity)
}

// Shards makes the process a replica of the group name, with its timing.
func (p *Process) Shards(cfg *rest.Config, opts *manager.Options, name string) (*sharding.Shards, error) {
	return sharding.New(cfg, opts, sharding.Options{
		Name: name, Namespace: p.Namespace, Identity: p.Identity,
		LeaseDuration: p.LeaseDuration, RenewDeadline: p.RenewDeadline, RetryPeriod: p.RetryPeriod,
	})
}
