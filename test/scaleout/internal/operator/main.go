// Command operator is the operator that package scaleout runs as several
// processes at once, to test sharding: one kfsm machine under a
// controller-runtime manager, without leader election, whose objects the
// replicas share through sharding.New.
//
// The machine is a pipeline of one state, Configured, over the Gadgets of
// one namespace. Its handler tells the test's recorder that it begins,
// works for -work, applies a ConfigMap named like the gadget with
// data.target set to spec.target, sets status.count to spec.target and
// status.note to the process's identity, and tells the recorder that it
// ends, and whether it ran to completion. It waits for the recorder's answer each time, so that the
// interval the recorder keeps lies within the handler's run: two runs
// that never overlap cannot be recorded as overlapping.
//
// The metrics endpoint (-metrics-addr) serves controller-runtime's
// registry: kfsm's shard metrics, and the process's own, which count what
// its cache decodes, for Gadgets and for their children, ConfigMaps:
//
//   - scaleout_gadgets_decoded_total and scaleout_configmaps_decoded_total,
//     every object the cache decoded (a list's items and every watch
//     event);
//   - scaleout_gadgets_seen and scaleout_configmaps_seen, the distinct
//     objects among them, by UID.
//
// The process exits with status 0 when SIGTERM or SIGINT stops it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
	"github.com/kfsm/kfsm/test/internal/testoperator"
)

// Configured is the machine's one state.
const Configured fsm.State = "Configured"

type options struct {
	*testoperator.Process
	recorder string
	work     time.Duration
	workers  int
}

func main() {
	o := options{Process: testoperator.Flags()}
	flag.StringVar(&o.recorder, "recorder", "", "base URL of the recorder that the handler reports its runs to")
	flag.StringVar(&o.MetricsAddr, "metrics-addr", "", "host:port of the metrics endpoint")
	flag.DurationVar(&o.work, "work", 20*time.Millisecond, "how long a handler works")
	flag.IntVar(&o.workers, "workers", 8, "how many gadgets the replica reconciles at once")
	flag.Parse()
	if o.Identity == "" || o.Namespace == "" || o.recorder == "" || o.MetricsAddr == "" {
		testoperator.Usage("-identity, -namespace, -recorder and -metrics-addr are required")
	}
	testoperator.Main(func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o options) error {
	cfg, opts, err := o.Setup("scaleout")
	if err != nil {
		return err
	}
	gadgets, configMaps := newDecodeCounter("gadgets"), newDecodeCounter("configmaps")
	opts.Cache.ByObject = map[client.Object]cache.ByObject{
		&v1alpha1.Gadget{}:  {Transform: gadgets.transform},
		&corev1.ConfigMap{}: {Transform: configMaps.transform},
	}
	shards, err := o.Shards(cfg, &opts, "scaleout")
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	h := &handlers{identity: o.Identity, recorder: o.recorder, work: o.work, http: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 2 * o.workers},
		Timeout:   30 * time.Second,
	}}
	m := fsm.New[*v1alpha1.Gadget]("scaleout", fsm.Pipeline).
		Initial(Configured).
		State(Configured, h.configure, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Tune(fsm.Tuning{Workers: o.workers}).
		Sharded(shards).
		PublishGraph(false)
	if err := m.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// handlers holds the machine's handler and what it reports to.
type handlers struct {
	identity, recorder string
	work               time.Duration
	http               *http.Client
}

// configure is the state's handler: it reports the run's begin and end
// to the recorder, around the work.
func (h *handlers) configure(ctx context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
	g := r.Object
	run := handlerRun{Replica: h.identity, UID: g.UID, Generation: g.Generation}
	if err := h.report(ctx, "begin", run); err != nil {
		// Nothing is done that the recorder has not heard of.
		return fsm.Fail(err)
	}
	defer func() {
		// The end is reported also when the manager stops, which cancels
		// ctx, so that the recorder closes the interval it opened.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := h.report(ctx, "end", run); err != nil {
			r.Log.Error(err, "reporting the end of a run")
		}
	}()
	time.Sleep(h.work)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: g.Name},
		Data:       map[string]string{"target": strconv.Itoa(int(g.Spec.Target))},
	}
	if err := r.Apply(ctx, cm); err != nil {
		return fsm.Fail(err)
	}
	g.Status.Count = g.Spec.Target
	g.Status.Note = h.identity
	run.Done = true
	return fsm.Done()
}

// handlerRun is what the recorder is told of a run: by whom, of which
// object and generation, and at its end whether it ran to completion.
type handlerRun struct {
	Replica    string    `json:"replica"`
	UID        types.UID `json:"uid"`
	Generation int64     `json:"generation"`
	Done       bool      `json:"done,omitempty"`
}

// report posts run to the recorder's endpoint and waits for its answer.
func (h *handlers) report(ctx context.Context, endpoint string, run handlerRun) error {
	body, err := json.Marshal(run)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.recorder+"/"+endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		return fmt.Errorf("reporting %s: %w", endpoint, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reporting %s: the recorder answered %s", endpoint, resp.Status)
	}
	return nil
}

// decodeCounter counts the objects of a kind that the cache decodes, as
// its transform sees them.
type decodeCounter struct {
	decoded prometheus.Counter
	seen    prometheus.Gauge

	mu   sync.Mutex
	uids map[types.UID]bool
}

func newDecodeCounter(plural string) *decodeCounter {
	c := &decodeCounter{
		decoded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scaleout_" + plural + "_decoded_total",
			Help: "Objects that the cache decoded: the items of its lists and the objects of its watch events.",
		}),
		seen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scaleout_" + plural + "_seen",
			Help: "Distinct objects, by UID, that the cache decoded.",
		}),
		uids: map[types.UID]bool{},
	}
	metrics.Registry.MustRegister(c.decoded, c.seen)
	return c
}

// transform counts obj and returns it unchanged.
func (c *decodeCounter) transform(obj any) (any, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	c.decoded.Inc()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uids[o.GetUID()] = true
	c.seen.Set(float64(len(c.uids)))
	return obj, nil
}
