package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

const (
	// warmUp is how many gadgets the driver creates and deletes before
	// the first run, from warmUpWriters.
	warmUp, warmUpWriters = 1000, 16
	// quiet is how long a controller must make no request and finish no
	// reconcile for a phase to be over.
	quiet = 2 * time.Second
)

// run is one measured run of an implementation.
type run struct {
	impl              string
	n, workers, round int
	// replicas is the number of sharded kfsm processes, in the sharded
	// mode; 0 otherwise.
	replicas int
	// last is the plan's last run: its objects go with the cluster at the
	// end instead of being deleted one by one, which at 100,000 gadgets
	// takes about as long as the run.
	last bool
}

// name names the run's namespace and profiles.
func (r run) name() string {
	if r.replicas > 0 {
		return fmt.Sprintf("%s-x%d-n%d-w%d-r%d", r.impl, r.replicas, r.n, r.workers, r.round)
	}
	return fmt.Sprintf("%s-n%d-w%d-r%d", r.impl, r.n, r.workers, r.round)
}

// result is what a run measured.
type result struct {
	run
	ready time.Duration // from the controller's start until all are Ready
	cpu   float64       // the controller's CPU seconds then
	rss   int64         // its peak RSS then, in bytes
	heap  int64         // its live heap after a forced collection, once quiet, in bytes
	// startUp is the CPU seconds the controller had spent when its cache
	// had listed the workload's kinds, before its first reconcile.
	startUp float64
	// readyReconciles counts the controller's reconciles until all were
	// Ready: the work that cpu paid for.
	readyReconciles int
	// reconciles and failed count the controller's reconciles, and the
	// failed ones, until it was quiet.
	reconciles, failed int
	// converge are the controller's requests until it was quiet after all
	// were Ready; server is the API server's count of the same, for the
	// workload's resources.
	converge, server map[string]int
	// resync and restart are the requests of those phases.
	resync, restart map[string]int
	// created is how long the API server took to create the n gadgets
	// from as many writers as the controller has workers: the rate of
	// writes that it sustains at the controller's concurrency, by which
	// floor measures the controller's time to Ready.
	created time.Duration
	// latencies are the single changes' times, each from the write until
	// the watch saw the gadget Ready at its new generation.
	latencies []time.Duration
	// writes are how long each single change's write took to be answered,
	// and changed the gadgets that each changed.
	writes  []time.Duration
	changed []string
	// churn is what the stream of changes cost, if it ran.
	churn churnResult
}

// driver runs the plan against one cluster, with a client of its own.
type driver struct {
	plan      *plan
	cluster   *cluster.Cluster
	client    client.WithWatch
	discovery *discovery.DiscoveryClient
	out       io.Writer
	logs      string // the directory of the controllers' logs
}

func (p *plan) run(ctx context.Context, out io.Writer) (err error) {
	if _, err := os.Stat(p.crds); err != nil {
		return fmt.Errorf("the test API's CRDs: %w (run from the repository's root, or pass -crds)", err)
	}
	if p.profiles != "" {
		if err := os.MkdirAll(p.profiles, 0o755); err != nil {
			return fmt.Errorf("the profiles' directory: %w", err)
		}
	}
	logs := p.logs
	if logs == "" {
		if logs, err = os.MkdirTemp("", "kfsm-bench-logs-"); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, os.RemoveAll(logs)) }()
	} else if err := os.MkdirAll(logs, 0o755); err != nil {
		return fmt.Errorf("the logs' directory: %w", err)
	}
	opts := cluster.Options{CRDPaths: []string{p.crds}}
	if p.sharded() {
		opts.FeatureGates = map[string]bool{"ShardedListAndWatch": true}
	}
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	defer func() { err = errors.Join(err, c.Stop()) }()
	d, err := newDriver(p, c, out)
	if err != nil {
		return err
	}
	d.logs = logs
	if err := d.describeMachine(); err != nil {
		return err
	}
	// The API server's first writes of its life are slower: they measure
	// no run.
	var warm time.Duration
	if err := d.withGadgets(ctx, "warm-up", warmUp, warmUpWriters, false, &warm, func() error { return nil }); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	if p.sharded() {
		return d.runSharded(ctx)
	}
	var results []result
	for _, n := range p.sizes {
		for _, w := range p.workers {
			for round := 1; round <= p.rounds; round++ {
				impls := d.order(round)
				for i, impl := range impls {
					r := run{impl: impl, n: n, workers: w, round: round, last: p.final(n, w, round) && i == len(impls)-1}
					res, err := d.measure(ctx, r)
					if measured(err) {
						printResult(out, res)
					}
					if err != nil {
						return fmt.Errorf("%s: %w", r.name(), err)
					}
					results = append(results, res)
				}
			}
			summarize(out, results, n, w)
		}
	}
	heapSlopes(out, results)
	return nil
}

func newDriver(p *plan, c *cluster.Cluster, out io.Writer) (*driver, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.Config)
	unthrottled(cfg)
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("the driver's client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("the driver's discovery client: %w", err)
	}
	return &driver{plan: p, cluster: c, client: cl, discovery: dc, out: out}, nil
}

// final reports whether the setting of n gadgets and w workers, in the
// given round, is the plan's last.
func (p *plan) final(n, w, round int) bool {
	return n == p.sizes[len(p.sizes)-1] && w == p.workers[len(p.workers)-1] && round == p.rounds
}

// order alternates the implementations' order from round to round.
func (d *driver) order(round int) []string {
	impls := slices.Clone(d.plan.impls)
	if round%2 == 0 {
		slices.Reverse(impls)
	}
	return impls
}

// measure runs an implementation over n new gadgets in a namespace of its
// own: convergence, a resync, single changes and a stream of them, and a
// restart.
func (d *driver) measure(ctx context.Context, r run) (res result, err error) {
	res.run = r
	ns := r.name()
	err = d.withGadgets(ctx, ns, r.n, r.workers, r.last, &res.created, func() error {
		p, err := d.converge(ctx, r, ns, &res)
		if p != nil {
			defer p.kill()
		}
		if err != nil {
			return fmt.Errorf("converging: %w", err)
		}
		if err := d.resync(ctx, p, r, &res); err != nil {
			return fmt.Errorf("resync: %w", err)
		}
		if err := d.changes(ctx, p, r, ns, &res); err != nil {
			return err
		}
		if err := p.stop(); err != nil {
			return err
		}
		if err := d.restart(ctx, r, ns, &res); err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		return nil
	})
	return res, err
}

// withGadgets creates the namespace ns with n new gadgets from that many
// concurrent writers, records how long that took in created, calls
// measure, and removes the namespace's objects afterwards unless keep.
func (d *driver) withGadgets(ctx context.Context, ns string, n, writers int, keep bool, created *time.Duration, measure func() error) (err error) {
	if err := d.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return fmt.Errorf("creating the namespace: %w", err)
	}
	defer func() {
		if keep || ctx.Err() != nil {
			return
		}
		switch cerr := d.cleanup(ctx, ns); {
		case cerr == nil:
		case err == nil:
			err = cleanupError{cerr}
		default:
			err = errors.Join(err, cerr)
		}
	}()
	start := time.Now()
	if err := d.createGadgets(ctx, ns, n, writers); err != nil {
		return err
	}
	*created = time.Since(start)
	return measure()
}

// cleanupError is an error of the cleanup after a run that measured all
// it had to.
type cleanupError struct{ error }

func (e cleanupError) Unwrap() error { return e.error }

// measured says whether a run that returned err measured all it had to:
// err is nil, or only its cleanup failed, which the figures do not need.
func measured(err error) bool {
	return err == nil || errors.As(err, new(cleanupError))
}

// converge starts the controller over the new gadgets and waits until all
// are Ready, then until it is quiet. The driver makes no request of its
// own meanwhile, except to read the API server's counters before and
// after: its watch of the gadgets is open before.
func (d *driver) converge(ctx context.Context, r run, ns string, res *result) (*process, error) {
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	ready, err := d.watchReady(watchCtx, ns, r.n)
	if err != nil {
		return nil, err
	}
	before, err := d.serverRequests(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	p, err := d.startController(ctx, d.controllerArgs(r, ns, ""))
	if err != nil {
		return nil, err
	}
	if err := p.await(ctx, ready, d.plan.timeout); err != nil {
		return p, fmt.Errorf("waiting for all to be Ready: %w", err)
	}
	res.ready = time.Since(start)
	atReady, err := p.report()
	if err != nil {
		return p, err
	}
	res.cpu, res.rss, res.startUp, res.readyReconciles = atReady.CPU, atReady.MaxRSS, atReady.StartUp, atReady.Reconciles
	if res.startUp == 0 {
		return p, errors.New("the controller did not record its start-up's CPU time")
	}
	settled, err := p.settle(ctx, 0, d.plan.timeout)
	if err != nil {
		return p, err
	}
	after, err := d.serverRequests(ctx)
	if err != nil {
		return p, err
	}
	res.converge, res.server = settled.Requests, subtract(after, before)
	res.reconciles, res.failed = settled.Reconciles, settled.Errors
	heap, err := p.command("heap")
	if err != nil {
		return p, err
	}
	res.heap = heap.LiveHeap
	return p, nil
}

// resync sends the controller every gadget again, with nothing changed,
// and counts the requests it makes. A controller whose Gadgets' watch
// passes only changes of the generation, the annotations or the labels
// drops them all, and reconciles none.
func (d *driver) resync(ctx context.Context, p *process, r run, res *result) error {
	before, err := p.report()
	if err != nil {
		return err
	}
	sent, err := p.command("resync")
	if err != nil {
		return err
	}
	if sent.Resynced != r.n {
		return fmt.Errorf("the controller's cache held %d gadgets, not %d", sent.Resynced, r.n)
	}
	reconciles := r.n
	if filtersUpdates[r.impl] {
		reconciles = 0
	}
	after, err := p.settle(ctx, before.Reconciles+reconciles, d.plan.timeout)
	if err != nil {
		return err
	}
	res.resync = subtract(after.Requests, before.Requests)
	return nil
}

// restart starts a new controller over the converged gadgets and counts
// its requests until it has reconciled them all and is quiet.
func (d *driver) restart(ctx context.Context, r run, ns string, res *result) error {
	p, err := d.startController(ctx, d.controllerArgs(r, ns, "-restart"))
	if err != nil {
		return err
	}
	defer p.kill()
	settled, err := p.settle(ctx, r.n, d.plan.timeout)
	if err != nil {
		return err
	}
	res.restart = settled.Requests
	return p.stop()
}

// profile is the path of a controller's CPU profile, or empty.
func (d *driver) profile(r run, suffix string) string {
	if d.plan.profiles == "" {
		return ""
	}
	return filepath.Join(d.plan.profiles, r.name()+suffix+".prof")
}

// createGadgets creates n gadgets, g-00000 onwards, from concurrent
// writers.
func (d *driver) createGadgets(ctx context.Context, ns string, n, writers int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for i := range next {
				g := &v1alpha1.Gadget{
					ObjectMeta: metav1.ObjectMeta{Name: gadgetName(i), Namespace: ns},
					Spec:       v1alpha1.GadgetSpec{Target: int32(i)},
				}
				if err := d.client.Create(ctx, g); err != nil {
					cancel(fmt.Errorf("creating gadget %s: %w", g.Name, err))
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// gadgetName names the i-th gadget of a run.
func gadgetName(i int) string { return fmt.Sprintf("g-%05d", i) }

// watchReady opens a watch of the namespace's gadgets and returns a
// channel that says when all n are Ready, or why that cannot be known.
func (d *driver) watchReady(ctx context.Context, ns string, n int) (<-chan error, error) {
	w, err := d.client.Watch(ctx, &v1alpha1.GadgetList{}, client.InNamespace(ns))
	if err != nil {
		return nil, fmt.Errorf("watching the gadgets: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- d.awaitReady(ctx, w, ns, n) }()
	return done, nil
}

func (d *driver) awaitReady(ctx context.Context, w watch.Interface, ns string, n int) error {
	ready := map[string]bool{}
	count := 0
	return d.followGadgets(ctx, w, ns, "", func(g *v1alpha1.Gadget, deleted bool) bool {
		now := !deleted && meta.IsStatusConditionTrue(g.Status.Conditions, fsm.ConditionReady)
		switch was := ready[g.Name]; {
		case now && !was:
			count++
		case was && !now:
			count--
		}
		ready[g.Name] = now
		return count == n
	})
}

// followGadgets passes each gadget that the watch w of the namespace
// reports to seen, until seen returns true or ctx ends. When the API
// server ends the watch, it watches again from the last version seen.
func (d *driver) followGadgets(ctx context.Context, w watch.Interface, ns, version string, seen func(g *v1alpha1.Gadget, deleted bool) bool) error {
	for {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				w.Stop()
				return fmt.Errorf("watching the gadgets: %w", apierrors.FromObject(ev.Object))
			}
			g, ok := ev.Object.(*v1alpha1.Gadget)
			if !ok {
				continue
			}
			version = g.ResourceVersion
			if seen(g, ev.Type == watch.Deleted) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var err error
		w, err = d.client.Watch(ctx, &v1alpha1.GadgetList{}, client.InNamespace(ns),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: version}})
		if err != nil {
			return fmt.Errorf("watching the gadgets again: %w", err)
		}
	}
}

// serverRequests reads the API server's apiserver_request_total for the
// workload's resources.
func (d *driver) serverRequests(ctx context.Context) (map[string]int, error) {
	data, err := d.discovery.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseRequestTotals(data), nil
}

// cleanup removes a run's objects, so that the API server's store does
// not grow from run to run: the cluster has no garbage collector and no
// namespace controller. The namespace stays, Terminating.
func (d *driver) cleanup(ctx context.Context, ns string) error {
	var gadgets v1alpha1.GadgetList
	if err := d.client.List(ctx, &gadgets, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("cleaning up: listing the gadgets: %w", err)
	}
	for i := range gadgets.Items {
		g := &gadgets.Items[i]
		if len(g.Finalizers) == 0 {
			continue
		}
		patch := client.MergeFrom(g.DeepCopy())
		g.Finalizers = nil
		if err := d.client.Patch(ctx, g, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("cleaning up: removing the finalizers of %s: %w", g.Name, err)
		}
	}
	for _, kind := range []struct {
		name string
		obj  client.Object
	}{
		{"gadgets", &v1alpha1.Gadget{}},
		{"configmaps", &corev1.ConfigMap{}},
		{"services", &corev1.Service{}},
		{"events", &corev1.Event{}},
		{"leases", &coordinationv1.Lease{}}, // of sharded replicas that did not leave
	} {
		// A collection of tens of thousands takes the API server longer
		// than its request timeout, which it may answer with a timeout or
		// by resetting the stream; it goes on deleting meanwhile, and the
		// next request takes up what is left.
		err := d.client.DeleteAllOf(ctx, kind.obj, client.InNamespace(ns))
		for tries := 1; tries < 10 && err != nil && ctx.Err() == nil; tries++ {
			time.Sleep(time.Second)
			err = d.client.DeleteAllOf(ctx, kind.obj, client.InNamespace(ns))
		}
		if err != nil {
			return fmt.Errorf("cleaning up: deleting the %s: %w", kind.name, err)
		}
	}
	if err := d.client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return fmt.Errorf("cleaning up: deleting the namespace: %w", err)
	}
	return nil
}
