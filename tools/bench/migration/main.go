// Command migration measures what a new version of a graph costs with
// objects in flight: N Gadgets at rest in the four states of version 1 of
// a machine, then an operator of version 2 that renames one state, splits
// one by the Gadget's name, removes one into another and adds one, as in
// kfsm's own migration test.
//
//	go run ./tools/bench/migration -n 10000
//
// The driver creates the Gadgets, spread evenly over version 1's states,
// and runs an operator of version 1 until every one is at rest with its
// ledger ConfigMap. It stops that operator and starts one of version 2,
// both in this process, and, from a watch opened before version 2 starts,
// counts every write of a Gadget and every ConfigMap created, changed or
// deleted, until every Gadget is at version 2 in the state that version 2
// says and the API server has been quiet for 2 s. Then it starts a second
// operator of version 2 over the migrated Gadgets, as a restart, and
// counts the writes until each Gadget's handler has run and the API
// server has been quiet for 2 s: objects already at the current version
// should cost none.
//
// It prints the time to migrate every Gadget, the Gadgets migrated a
// second, and per state of version 1 the writes per Gadget (median and
// largest), then the writes of the restart. A Gadget left Stalled, in
// the wrong state or with its ledger re-created fails the run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

const namespace = "migration"

type gadget = v1alpha1.Gadget

func main() {
	n := flag.Int("n", 10000, "the Gadgets to migrate")
	workers := flag.Int("workers", 8, "the operators' workers")
	crds := flag.String("crds", "internal/testapi/crd", "the directory of the test API's CRDs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *n, *workers, *crds); err != nil {
		fmt.Fprintln(os.Stderr, "migration:", err)
		os.Exit(1)
	}
}

// The states of version 1, by spec.target.
var versionOne = map[int32]fsm.State{1: "Old", 2: "Both", 3: "Gone", 4: "Kept"}

// migrated is the state that version 2 puts a Gadget of version 1 in.
func migrated(g *gadget) fsm.State {
	switch versionOne[g.Spec.Target] {
	case "Old":
		return "New"
	case "Both":
		return half(g)
	}
	return "Kept"
}

// half splits Both by the last character of the Gadget's name.
func half(g *gadget) fsm.State {
	if g.Name[len(g.Name)-1]%2 == 0 {
		return "Left"
	}
	return "Right"
}

// runs counts the resting handler's runs.
var runs atomic.Int64

// resting applies the Gadget's ledger ConfigMap, the same in both
// versions, and rests.
func resting(ctx context.Context, r *fsm.Request[*gadget]) fsm.Result {
	runs.Add(1)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-ledger"}, Data: map[string]string{"owner": r.Object.Name}}
	if err := r.Apply(ctx, cm); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Wait(0, "Resting")
}

func sorting(states map[int32]fsm.State) fsm.Handler[*gadget] {
	return func(_ context.Context, r *fsm.Request[*gadget]) fsm.Result {
		return fsm.Next(states[r.Object.Spec.Target])
	}
}

func machine(version, workers int) *fsm.Machine[*gadget] {
	m := fsm.New[*gadget]("migration", fsm.Lifecycle).Initial("Start").
		OnDelete("Cleanup").State("Cleanup", nil, fsm.Final()).
		Owns(&corev1.ConfigMap{}).Tune(fsm.Tuning{Workers: workers})
	if version == 1 {
		return m.State("Start", sorting(versionOne), fsm.To("Old", "Both", "Gone", "Kept")).
			State("Old", resting, fsm.Final()).State("Both", resting, fsm.Final()).
			State("Gone", resting, fsm.Final()).State("Kept", resting, fsm.Final())
	}
	return m.State("Start", sorting(map[int32]fsm.State{1: "New", 2: "Left", 3: "Kept", 4: "Kept", 5: "Added"}),
		fsm.To("New", "Left", "Right", "Kept", "Added")).
		State("New", resting, fsm.Final()).State("Left", resting, fsm.Final()).State("Right", resting, fsm.Final()).
		State("Kept", resting, fsm.Final()).State("Added", resting, fsm.Final()).
		Version(2, fsm.Rename("Old", "New"), fsm.Split("Both", half), fsm.Remove("Gone", "Kept"))
}

func run(ctx context.Context, out io.Writer, n, workers int, crds string) (err error) {
	ctrl.SetLogger(logr.Discard())
	c, err := cluster.Start(ctx, cluster.Options{CRDPaths: []string{crds}})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Stop()) }()
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0 // unthrottled: the API server is the bound
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		return err
	}
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d Gadgets, %d workers\n", n, workers)
	start := time.Now()
	if err := create(ctx, cl, n); err != nil {
		return err
	}
	v1 := startOperator(ctx, cfg, scheme, machine(1, workers))
	err = await(ctx, cl, func(g *gadget) bool { return g.Status.State == versionOne[g.Spec.Target] && len(g.Status.Outputs) == 1 })
	if err := errors.Join(err, v1()); err != nil {
		return fmt.Errorf("version 1: %w", err)
	}
	fmt.Fprintf(out, "version 1: every Gadget at rest after %s\n", time.Since(start).Round(time.Second))
	before, err := list(ctx, cl)
	if err != nil {
		return err
	}

	w, err := watchWrites(ctx, cl)
	if err != nil {
		return err
	}
	start = time.Now()
	v2 := startOperator(ctx, cfg, scheme, machine(2, workers))
	err = await(ctx, cl, func(g *gadget) bool { return g.Status.GraphVersion == 2 && g.Status.State == migrated(g) })
	took := time.Since(start)
	err = errors.Join(err, w.quiet(ctx, 2*time.Second), v2())
	w.stop()
	if err != nil {
		return fmt.Errorf("version 2: %w", err)
	}
	fmt.Fprintf(out, "version 2: every Gadget migrated after %s, %.0f a second\n", took.Round(100*time.Millisecond), float64(n)/took.Seconds())
	if err := w.report(out, before); err != nil {
		return err
	}

	w, err = watchWrites(ctx, cl)
	if err != nil {
		return err
	}
	runs.Store(0)
	again := startOperator(ctx, cfg, scheme, machine(2, workers))
	err = waitFor(ctx, func() bool { return runs.Load() >= int64(n) })
	err = errors.Join(err, w.quiet(ctx, 2*time.Second), again())
	w.stop()
	if err != nil {
		return fmt.Errorf("version 2 restarted: %w", err)
	}
	gadgets, configMaps := w.totals()
	fmt.Fprintf(out, "version 2 restarted over the migrated Gadgets: %d handler runs, %d Gadget writes, %d ConfigMap writes\n", runs.Load(), gadgets, configMaps)
	return nil
}

// create creates n Gadgets, their targets spread over version 1's states,
// from 8 writers.
func create(ctx context.Context, cl client.Client, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += 8 {
				g := &gadget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("g-%05d", i)},
					Spec: v1alpha1.GadgetSpec{Target: int32(i%4) + 1}}
				errs[w] = cl.Create(ctx, g)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startOperator starts a manager with the machine, and returns the
// function that stops it and says why it ended.
func startOperator(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, m *fsm.Machine[*gadget]) func() error {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		// The operators run one after the other in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	fsm.LeanCache(&opts)
	mgr, err := ctrl.NewManager(cfg, opts)
	if err == nil {
		err = m.SetupWithManager(mgr)
	}
	if err != nil {
		done <- err
	} else {
		go func() { done <- mgr.Start(ctx) }()
	}
	return func() error {
		cancel()
		return <-done
	}
}

func list(ctx context.Context, cl client.Client) (map[string]gadget, error) {
	var l v1alpha1.GadgetList
	if err := cl.List(ctx, &l, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	m := make(map[string]gadget, len(l.Items))
	for _, g := range l.Items {
		m[g.Name] = g
	}
	return m, nil
}

// await polls until every Gadget satisfies ok; a Stalled one fails it.
func await(ctx context.Context, cl client.Client, ok func(*gadget) bool) error {
	var failed error
	err := waitFor(ctx, func() bool {
		gadgets, err := list(ctx, cl)
		if err != nil {
			failed = err
			return true
		}
		for _, g := range gadgets {
			for _, c := range g.Status.Conditions {
				if c.Type == fsm.ConditionStalled && c.Status == metav1.ConditionTrue {
					failed = fmt.Errorf("%s is Stalled in %s: %s: %s", g.Name, g.Status.State, c.Reason, c.Message)
					return true
				}
			}
			if !ok(&g) {
				return false
			}
		}
		return true
	})
	return errors.Join(err, failed)
}

func waitFor(ctx context.Context, done func() bool) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Minute)
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return errors.New("not done after 30 minutes")
		case <-tick.C:
		}
	}
	return nil
}

// writes counts, from watches, the writes of each Gadget and of the
// ConfigMaps.
type writes struct {
	mu         sync.Mutex
	gadgets    map[string]int
	configMaps map[watch.EventType]int
	last       time.Time
	stops      []func()
}

func watchWrites(ctx context.Context, cl client.WithWatch) (*writes, error) {
	w := &writes{gadgets: map[string]int{}, configMaps: map[watch.EventType]int{}, last: time.Now()}
	for _, l := range []client.ObjectList{&v1alpha1.GadgetList{}, &corev1.ConfigMapList{}} {
		if err := cl.List(ctx, l, client.InNamespace(namespace), client.Limit(1)); err != nil {
			return nil, err
		}
		wi, err := cl.Watch(ctx, l, client.InNamespace(namespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.GetResourceVersion()}})
		if err != nil {
			return nil, err
		}
		w.stops = append(w.stops, wi.Stop)
		go func() {
			for ev := range wi.ResultChan() {
				w.mu.Lock()
				w.last = time.Now()
				switch o := ev.Object.(type) {
				case *gadget:
					if ev.Type == watch.Modified {
						w.gadgets[o.Name]++
					}
				case *corev1.ConfigMap:
					if o.Name != "kube-root-ca.crt" {
						w.configMaps[ev.Type]++
					}
				}
				w.mu.Unlock()
			}
		}()
	}
	return w, nil
}

func (w *writes) stop() {
	for _, s := range w.stops {
		s()
	}
}

// quiet waits until the watches have seen nothing for d.
func (w *writes) quiet(ctx context.Context, d time.Duration) error {
	return waitFor(ctx, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return time.Since(w.last) >= d
	})
}

func (w *writes) totals() (gadgets, configMaps int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.gadgets {
		gadgets += c
	}
	for _, c := range w.configMaps {
		configMaps += c
	}
	return gadgets, configMaps
}

// report prints the writes per Gadget by its state in version 1, and
// fails on a ledger created or deleted by the migration.
func (w *writes) report(out io.Writer, before map[string]gadget) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	byState := map[fsm.State][]int{}
	for name, g := range before {
		byState[g.Status.State] = append(byState[g.Status.State], w.gadgets[name])
	}
	fmt.Fprintln(out, "writes per Gadget, by its state in version 1:")
	total := 0
	for _, s := range slices.Sorted(maps.Keys(byState)) {
		counts := byState[s]
		sort.Ints(counts)
		sum := 0
		for _, c := range counts {
			sum += c
		}
		total += sum
		fmt.Fprintf(out, "  %-5s %6d Gadgets  %6d writes  median %d  largest %d\n", s, len(counts), sum, counts[len(counts)/2], counts[len(counts)-1])
	}
	fmt.Fprintf(out, "  all   %6d Gadgets  %6d writes  %.2f a Gadget; ConfigMaps: %d created, %d changed, %d deleted\n",
		len(before), total, float64(total)/float64(len(before)), w.configMaps[watch.Added], w.configMaps[watch.Modified], w.configMaps[watch.Deleted])
	if w.configMaps[watch.Added]+w.configMaps[watch.Deleted] > 0 {
		return errors.New("the migration created or deleted ledgers")
	}
	return nil
}
