package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	goruntime "runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// setups registers each implementation of the workload with a manager,
// with the given number of workers.
var setups = map[string]func(mgr ctrl.Manager, workers int) error{
	"kfsm":            setupKfsm,
	"hand":            setupHand,
	"hand-unfiltered": setupHandUnfiltered,
	"hand-full":       setupHandFull,
}

// filtersUpdates are the implementations whose Gadgets' watch passes only
// changes of the generation, the annotations or the labels.
var filtersUpdates = map[string]bool{"hand": true, "hand-full": true}

// controllerArgs are the controller process's flags, which the driver sets.
type controllerArgs struct {
	impl, namespace, kubeconfig, cpuprofile string
	// log is the file that the controller's log goes to.
	log     string
	workers int
	// shard is the process's identity among the replicas of a sharded
	// kfsm machine; empty runs the machine unsharded. A sharded replica
	// logs its walks to the file walks.
	shard, walks string
}

func (a controllerArgs) list() []string {
	return []string{controllerFlag, a.impl, "-namespace", a.namespace, "-kubeconfig", a.kubeconfig,
		"-workers", fmt.Sprint(a.workers), "-cpuprofile", a.cpuprofile, "-log", a.log, "-shard", a.shard, "-walks", a.walks}
}

func parseControllerArgs(args []string) (controllerArgs, error) {
	var a controllerArgs
	fs := flag.NewFlagSet("bench controller", flag.ContinueOnError)
	fs.StringVar(&a.impl, "controller", "", "the implementation to run")
	fs.StringVar(&a.namespace, "namespace", "", "the namespace to serve")
	fs.StringVar(&a.kubeconfig, "kubeconfig", "", "the cluster's kubeconfig")
	fs.StringVar(&a.cpuprofile, "cpuprofile", "", "a file for the CPU profile; the heap profile goes beside it")
	fs.StringVar(&a.log, "log", "", "the file that the log goes to")
	fs.IntVar(&a.workers, "workers", 1, "concurrent reconciles")
	fs.StringVar(&a.shard, "shard", "", "this replica's identity, to run the kfsm machine sharded")
	fs.StringVar(&a.walks, "walks", "", "the file that a sharded replica logs its walks to")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	if _, ok := setups[a.impl]; !ok {
		return a, fmt.Errorf("unknown implementation %q", a.impl)
	}
	if a.shard != "" && a.impl != "kfsm" {
		return a, fmt.Errorf("only kfsm runs sharded, not %s", a.impl)
	}
	if (a.shard == "") != (a.walks == "") {
		return a, errors.New("-shard and -walks go together")
	}
	if a.namespace == "" || a.kubeconfig == "" || a.log == "" {
		return a, errors.New("-namespace, -kubeconfig and -log are required")
	}
	return a, nil
}

// controllerMain is the controller process: a manager that runs one
// implementation of the workload over one namespace, or one replica of the
// sharded kfsm machine, and answers the driver's commands, one a line on
// standard input, each with a JSON report on a line of standard output:
//
//   - report: the process's counters;
//   - resync: every cached Gadget is sent to the controller again as a
//     resync's update event, then the counters.
//
// The process stops at the end of its input.
func controllerMain(args []string) (err error) {
	a, err := parseControllerArgs(args)
	if err != nil {
		return err
	}
	logFile, err := os.Create(a.log)
	if err != nil {
		return fmt.Errorf("creating the log: %w", err)
	}
	defer func() { err = errors.Join(err, logFile.Close()) }()
	// Every controller logs the same way, as one runs in production:
	// controller-runtime's zap logger without its development mode, JSON
	// lines from the info level up, with zap's sampling of repeats.
	log := crzap.New(crzap.WriteTo(logFile), crzap.UseDevMode(false), func(o *crzap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder })
	ctrl.SetLogger(log)
	c := &counters{requests: newRequestCounter(), decodes: newDecodeCounter(), reported: func() {}}
	if a.cpuprofile != "" {
		stopProfiles, reported, perr := startProfiles(a.cpuprofile)
		if perr != nil {
			return perr
		}
		c.reported = reported
		c.liveProfile = strings.TrimSuffix(a.cpuprofile, ".prof") + ".live.heap"
		defer func() { err = errors.Join(err, stopProfiles()) }()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	unthrottled(cfg)
	cfg.Wrap(c.requests.wrap)
	resync := &resyncer{}
	opts, err := managerOptions(a.namespace, resync, c.decodes, log)
	if err != nil {
		return err
	}
	switch a.impl {
	case "kfsm":
		// As the operators that kfsm init writes have it.
		fsm.LeanCache(&opts)
	case "hand", "hand-full":
		stripManagedFields(&opts)
	}
	if a.shard == "" {
		mgr, err := ctrl.NewManager(cfg, opts)
		if err != nil {
			return fmt.Errorf("creating the manager: %w", err)
		}
		if err := setups[a.impl](mgr, a.workers); err != nil {
			return fmt.Errorf("setting up %s: %w", a.impl, err)
		}
		return serve(mgr, resync, c)
	}
	shards, err := sharding.New(cfg, &opts, shardOptions(a))
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if c.walks, err = openWalkLog(a.walks); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.walks.close()) }()
	if err := gadgetMachine(a.workers).Sharded(shards).Observe(fsm.Observers[*v1alpha1.Gadget]{Walk: c.walks.observe}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up sharded kfsm: %w", err)
	}
	return serve(mgr, resync, c)
}

// managerOptions are the manager's options, before sharding.New changes them
// for a sharded replica: a cache of one namespace whose Gadget informer
// counts what it decodes.
func managerOptions(namespace string, resync *resyncer, decodes *decodeCounter, log logr.Logger) (ctrl.Options, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return ctrl.Options{}, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return ctrl.Options{}, err
	}
	return ctrl.Options{
		Scheme: scheme,
		Logger: log,
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{namespace: {}},
			ByObject:          map[client.Object]cache.ByObject{&v1alpha1.Gadget{}: {Transform: decodes.transform}},
		},
		NewCache:               resync.newCache,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	}, nil
}

// stripManagedFields gives the filtered hand-written controllers a cache
// without managed fields, as kfsm's has, in the way that
// controller-runtime offers: its transform after each other one. A
// careful engineer strips them once the cache's memory matters; the
// controller as it is often written keeps them.
func stripManagedFields(opts *ctrl.Options) {
	strip := cache.TransformStripManagedFields()
	opts.Cache.DefaultTransform = strip
	for obj, b := range opts.Cache.ByObject {
		transform := b.Transform
		if transform == nil {
			continue // it defaults to strip
		}
		b.Transform = func(in any) (any, error) {
			out, err := transform(in)
			if err != nil {
				return nil, err
			}
			return strip(out)
		}
		opts.Cache.ByObject[obj] = b
	}
}

// shardOptions make the replicas of a run one group, with Leases in the
// run's namespace, timed for a benchmark: they find each other and divide
// the slots within a few RetryPeriods of starting.
func shardOptions(a controllerArgs) sharding.Options {
	return sharding.Options{
		Name:          "bench",
		Namespace:     a.namespace,
		Identity:      a.shard,
		LeaseDuration: 4 * time.Second,
		RenewDeadline: 3 * time.Second,
		RetryPeriod:   500 * time.Millisecond,
	}
}

// unthrottled lifts client-go's client-side rate limit.
func unthrottled(cfg *rest.Config) {
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
}

// counters are what a controller process counts of itself.
type counters struct {
	requests *requestCounter
	decodes  *decodeCounter
	// reported is called on each report: the first one reads the peak
	// RSS that the driver records.
	reported func()
	// liveProfile is the file of the heap profile written with the live
	// heap, when the process writes profiles.
	liveProfile string
	// walks is a sharded replica's log of its walks, nil otherwise.
	walks *walkLog
	// synced is the CPU time, as math.Float64bits of seconds, at the
	// moment the cache had listed the workload's kinds; 0 before.
	synced atomic.Uint64
}

// recordStartUp waits until the cache has listed the workload's kinds, as
// the controller does before its workers start, and records the CPU time
// spent until then: the process's start-up, the same for any reconciler.
func (c *counters) recordStartUp(ctx context.Context, informers cache.Cache) {
	for _, obj := range []client.Object{&v1alpha1.Gadget{}, &corev1.ConfigMap{}, &corev1.Service{}} {
		if _, err := informers.GetInformer(ctx, obj); err != nil {
			return
		}
	}
	if informers.WaitForCacheSync(ctx) {
		cpu, _ := resourceUsage()
		c.synced.Store(math.Float64bits(cpu))
	}
}

// serve runs the manager and answers the driver until standard input ends.
func serve(mgr ctrl.Manager, resync *resyncer, c *counters) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	go c.recordStartUp(ctx, mgr.GetCache())
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	out := json.NewEncoder(os.Stdout)
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("the manager stopped by itself")
			}
			return err
		case line, ok := <-lines:
			if !ok {
				cancel()
				return <-done
			}
			rep, err := answer(ctx, line, resync, c)
			if err != nil {
				return err
			}
			if err := out.Encode(rep); err != nil {
				return fmt.Errorf("writing a report: %w", err)
			}
		}
	}
}

func answer(ctx context.Context, command string, resync *resyncer, c *counters) (report, error) {
	switch command {
	case "report":
		c.reported()
		if c.walks != nil {
			if err := c.walks.flush(); err != nil {
				return report{}, fmt.Errorf("writing the walk log: %w", err)
			}
		}
		return snapshot(c), nil
	case "heap":
		// The live heap after a forced collection: what the process
		// keeps, its garbage aside. Asked for once the controller is
		// quiet, after its CPU time was read.
		goruntime.GC()
		sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
		rtmetrics.Read(sample)
		rep := snapshot(c)
		rep.LiveHeap = int64(sample[0].Value.Uint64())
		if c.liveProfile != "" {
			// Of the collection just forced: what the live heap holds.
			if err := writeHeapProfile(c.liveProfile); err != nil {
				return report{}, err
			}
		}
		return rep, nil
	case "resync":
		n, err := resync.replay(ctx)
		if err != nil {
			return report{}, err
		}
		rep := snapshot(c)
		rep.Resynced = n
		return rep, nil
	}
	return report{}, fmt.Errorf("unknown command %q", command)
}

// report is what a controller process says about itself.
type report struct {
	// Reconciles counts the reconciles that returned, and Errors those
	// that returned an error, from controller-runtime's metrics, which
	// both implementations have: counting costs neither anything.
	Reconciles int `json:"reconciles"`
	Errors     int `json:"errors"`
	// Requests are the API requests made, by "verb resource".
	Requests map[string]int `json:"requests"`
	// Idle is how long ago, in seconds, the last request started or ended.
	Idle float64 `json:"idle"`
	// CPU is user and system time in seconds; MaxRSS is in bytes.
	CPU    float64 `json:"cpu"`
	MaxRSS int64   `json:"maxrss"`
	// StartUp is the CPU time, in seconds, that the process had spent
	// when its cache had listed the workload's kinds; 0 until then.
	StartUp float64 `json:"startup"`
	// LiveHeap is, in answer to "heap", the live heap in bytes after a
	// forced collection.
	LiveHeap int64 `json:"liveheap,omitempty"`
	// Resynced is how many Gadgets a resync sent again.
	Resynced int `json:"resynced,omitempty"`
	// Decodes counts the Gadgets that the cache decoded, from lists and
	// watch events, and Gadgets the distinct ones among them.
	Decodes int `json:"decodes"`
	Gadgets int `json:"gadgets"`
}

func snapshot(c *counters) report {
	counts, idle := c.requests.snapshot()
	cpu, rss := resourceUsage()
	rep := report{Requests: counts, Idle: idle.Seconds(), CPU: cpu, MaxRSS: rss, StartUp: math.Float64frombits(c.synced.Load())}
	rep.Decodes, rep.Gadgets = c.decodes.snapshot()
	families, err := metrics.Registry.Gather()
	if err != nil {
		rep.Reconciles, rep.Errors = -1, -1
		return rep
	}
	for _, f := range families {
		switch f.GetName() {
		case "controller_runtime_reconcile_total":
			rep.Reconciles = counterSum(f)
		case "controller_runtime_reconcile_errors_total":
			rep.Errors = counterSum(f)
		}
	}
	return rep
}

func counterSum(f *dto.MetricFamily) int {
	n := 0.0
	for _, m := range f.GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return int(n)
}

// resyncer sends the Gadgets in the cache to the controller again, as a
// cache's SyncPeriod does on a timer: an update event with the same object
// before and after, to every handler of the Gadget informer. Both
// implementations see the same events through their own predicates, and
// the driver chooses the moment, so no timer has to outlast convergence
// and the child informers, which a SyncPeriod would resync too, at times
// of their own, stay out of it.
type resyncer struct {
	cache cache.Cache

	mu       sync.Mutex
	handlers []toolscache.ResourceEventHandler
}

// newCache is the manager's NewCache: the usual cache, whose Gadget
// informer tells the resyncer its handlers.
func (r *resyncer) newCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	r.cache = c
	return &resyncCache{Cache: c, resyncer: r}, nil
}

func (r *resyncer) add(h toolscache.ResourceEventHandler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers = append(r.handlers, h)
}

// replay sends every cached Gadget to the handlers and returns how many
// there were.
func (r *resyncer) replay(ctx context.Context) (int, error) {
	var list v1alpha1.GadgetList
	if err := r.cache.List(ctx, &list); err != nil {
		return 0, fmt.Errorf("listing the cached gadgets: %w", err)
	}
	r.mu.Lock()
	handlers := r.handlers
	r.mu.Unlock()
	for _, h := range handlers {
		for i := range list.Items {
			h.OnUpdate(&list.Items[i], &list.Items[i])
		}
	}
	return len(list.Items), nil
}

type resyncCache struct {
	cache.Cache
	resyncer *resyncer
}

func (c *resyncCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformer(ctx, obj, opts...)
	if _, gadget := obj.(*v1alpha1.Gadget); err != nil || !gadget {
		return inf, err
	}
	return &recordingInformer{Informer: inf, resyncer: c.resyncer}, nil
}

// recordingInformer tells the resyncer the handlers added to an informer.
type recordingInformer struct {
	cache.Informer
	resyncer *resyncer
}

func (i *recordingInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	i.resyncer.add(h)
	return i.Informer.AddEventHandler(h)
}

func (i *recordingInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	i.resyncer.add(h)
	return i.Informer.AddEventHandlerWithResyncPeriod(h, resync)
}

func (i *recordingInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	i.resyncer.add(h)
	return i.Informer.AddEventHandlerWithOptions(h, opts)
}

// startProfiles starts the CPU profile and the peak heap profile. The
// first returned function stops them and writes the heap profile beside
// them; the second ends the peak heap profile, at the first report, so
// that it covers the same span as the peak RSS. Heap samples are taken
// every 64 KiB rather than every 512 KiB, so that a difference of a few
// hundred bytes per object shows.
func startProfiles(path string) (stop func() error, reported func(), err error) {
	goruntime.MemProfileRate = 64 << 10
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	stopPeak := sync.OnceValue(watchPeakHeap(strings.TrimSuffix(path, ".prof") + ".peak.heap"))
	stop = func() error {
		pprof.StopCPUProfile()
		return errors.Join(f.Close(), stopPeak(), writeHeapProfile(strings.TrimSuffix(path, ".prof")+".heap"))
	}
	return stop, func() { _ = stopPeak() }, nil
}

// watchPeakHeap writes a heap profile to path each time the live heap
// grows by a tenth past its largest size yet, so that the last one shows
// what the process held near its peak; the returned function stops it.
func watchPeakHeap(path string) func() error {
	sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		var peak uint64
		var err error
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- err
				return
			case <-tick.C:
			}
			rtmetrics.Read(sample)
			if live := sample[0].Value.Uint64(); live > peak+peak/10 {
				peak = live
				err = writeHeapProfile(path)
			}
		}
	}()
	return func() error {
		close(stop)
		return <-done
	}
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the heap profile: %w", err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing the heap profile: %w", err)
	}
	return f.Close()
}
