package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
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

// result is one measured run.
type result struct {
	impl             string
	n, workers       int
	round            int
	ready            time.Duration
	cpu              float64 // seconds
	rss              int64   // bytes
	converge         map[string]int
	server           map[string]int // the API server's count of the same
	restart          map[string]int
	restartListWatch map[string]int
}

// driver holds the cluster and a client of its own.
type driver struct {
	cluster   *cluster.Cluster
	client    client.WithWatch
	cfg       *rest.Config
	discovery *discovery.DiscoveryClient
	plan      *plan
	out       io.Writer
}

func (p *plan) run(ctx context.Context, out io.Writer) error {
	if _, err := os.Stat(p.crds); err != nil {
		return fmt.Errorf("the test API's CRDs: %w (run from the repository's root, or pass -crds)", err)
	}
	if p.profiles != "" {
		if err := os.MkdirAll(p.profiles, 0o755); err != nil {
			return err
		}
	}
	c, err := cluster.Start(ctx, cluster.Options{CRDPaths: []string{p.crds}})
	if err != nil {
		return err
	}
	defer func() { _ = c.Stop() }()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg := rest.CopyConfig(c.Config)
	unthrottled(cfg)
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	d := &driver{cluster: c, client: cl, cfg: cfg, discovery: dc, plan: p, out: out}
	if err := d.describeMachine(); err != nil {
		return err
	}
	var results []result
	for _, n := range p.sizes {
		for _, w := range p.workers {
			for round := 1; round <= p.rounds; round++ {
				order := p.impls
				if round%2 == 0 {
					order = reversed(order)
				}
				for _, impl := range order {
					r, err := d.measure(ctx, impl, n, w, round)
					if err != nil {
						return fmt.Errorf("%s, n=%d, %d workers, round %d: %w", impl, n, w, round, err)
					}
					fmt.Fprintln(out, r.line())
					results = append(results, r)
				}
			}
			summarize(out, results, n, w)
		}
	}
	return nil
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// measure runs one implementation over n new objects: convergence, then
// a restart over the converged objects.
func (d *driver) measure(ctx context.Context, impl string, n, workers, round int) (result, error) {
	r := result{impl: impl, n: n, workers: workers, round: round}
	ns := fmt.Sprintf("%s-n%d-w%d-r%d", impl, n, workers, round)
	if err := d.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return r, err
	}
	defer d.cleanup(context.WithoutCancel(ctx), ns)
	if err := d.createGadgets(ctx, ns, n); err != nil {
		return r, err
	}
	ready, err := d.watchReady(ctx, ns, n)
	if err != nil {
		return r, err
	}
	before, err := d.serverRequests(ctx)
	if err != nil {
		return r, err
	}

	profile := ""
	if d.plan.profiles != "" {
		profile = filepath.Join(d.plan.profiles, fmt.Sprintf("%s-n%d-w%d-r%d.prof", impl, n, workers, round))
	}
	start := time.Now()
	p, err := d.startController(ctx, impl, ns, workers, profile)
	if err != nil {
		return r, err
	}
	select {
	case <-ready:
	case err := <-p.exited:
		return r, fmt.Errorf("the controller exited before all were Ready: %w", err)
	case <-ctx.Done():
		_ = p.stop()
		return r, ctx.Err()
	}
	r.ready = time.Since(start)
	rep, err := p.report()
	if err != nil {
		return r, err
	}
	r.cpu, r.rss, r.converge = rep.CPU, rep.MaxRSS, rep.Requests
	after, err := d.serverRequests(ctx)
	if err != nil {
		return r, err
	}
	r.server = diff(after, before)
	if err := p.stop(); err != nil {
		return r, err
	}

	// A restart over converged objects: every object is reconciled again.
	p, err = d.startController(ctx, impl, ns, workers, "")
	if err != nil {
		return r, err
	}
	rep, err = p.settle(n)
	if stopErr := p.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	r.restart, r.restartListWatch = splitListWatch(rep.Requests)
	return r, nil
}

// createGadgets creates n gadgets with 16 writers.
func (d *driver) createGadgets(ctx context.Context, ns string, n int) error {
	names := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range names {
				g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("g-%05d", i), Namespace: ns}, Spec: v1alpha1.GadgetSpec{Target: int32(i)}}
				if err := d.client.Create(ctx, g); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for i := range n {
		select {
		case names <- i:
		case err = <-errs:
			break feed
		}
	}
	close(names)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// watchReady returns a channel that is closed once all n gadgets of ns
// are Ready, as a watch opened now sees them.
func (d *driver) watchReady(ctx context.Context, ns string, n int) (<-chan struct{}, error) {
	w, err := d.client.Watch(ctx, &v1alpha1.GadgetList{}, client.InNamespace(ns))
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer w.Stop()
		ready := map[string]bool{}
		for ev := range w.ResultChan() {
			g, ok := ev.Object.(*v1alpha1.Gadget)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			ready[g.Name] = meta.IsStatusConditionTrue(g.Status.Conditions, fsm.ConditionReady)
			if countTrue(ready) == n {
				close(done)
				return
			}
		}
	}()
	return done, nil
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// cleanup removes a run's objects, so that the API server's store does
// not grow from run to run. There is no garbage collector or namespace
// controller in this cluster.
func (d *driver) cleanup(ctx context.Context, ns string) {
	for _, obj := range []client.Object{&v1alpha1.Gadget{}, &corev1.ConfigMap{}, &corev1.Service{}, &eventsv1.Event{}} {
		if err := d.client.DeleteAllOf(ctx, obj, client.InNamespace(ns)); err != nil {
			fmt.Fprintf(os.Stderr, "bench: cleaning up %s: %v\n", ns, err)
		}
	}
}

// process is a controller process.
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	exited chan error
	once   sync.Once
	err    error
}

func (d *driver) startController(ctx context.Context, impl, ns string, workers int, profile string) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-controller", impl, "-controller-namespace", ns, "-controller-kubeconfig", d.cluster.Kubeconfig,
		"-controller-workers", fmt.Sprint(workers), "-controller-cpuprofile", profile)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = processAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

func (p *process) report() (report, error) {
	var rep report
	if _, err := io.WriteString(p.stdin, "report\n"); err != nil {
		return rep, fmt.Errorf("asking the controller for a report: %w", err)
	}
	line, err := p.stdout.ReadBytes('\n')
	if err != nil {
		return rep, fmt.Errorf("reading the controller's report: %w", err)
	}
	return rep, json.Unmarshal(line, &rep)
}

// settle waits until the controller has reconciled at least n objects and
// then made no request for two seconds, and reports.
func (p *process) settle(n int) (report, error) {
	deadline := time.Now().Add(30 * time.Minute)
	var last report
	quietSince := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		rep, err := p.report()
		if err != nil {
			return rep, err
		}
		if total(rep.Requests) != total(last.Requests) || rep.Reconciles != last.Reconciles {
			quietSince = time.Now()
		}
		last = rep
		if rep.Reconciles >= n && time.Since(quietSince) >= 2*time.Second {
			return rep, nil
		}
	}
	return last, fmt.Errorf("not settled after 30 minutes: %d reconciles", last.Reconciles)
}

func (p *process) stop() error {
	p.once.Do(func() {
		_, _ = io.WriteString(p.stdin, "stop\n")
		_ = p.stdin.Close()
		select {
		case err := <-p.exited:
			p.err = err
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			p.err = errors.Join(errors.New("the controller did not stop in 30 s"), <-p.exited)
		}
	})
	return p.err
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func diff(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
