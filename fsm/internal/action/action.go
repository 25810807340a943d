// Package action runs a machine's asynchronous actions in a bounded pool,
// outside the reconcile workers, and keeps what each run did until the
// object's status records it.
//
// A run goes through three phases. It is prepared by the walk that
// records its intent, and launched only once that walk's status is
// written: no work starts before its intent is on the API server. It then
// runs, reporting checkpoints and heartbeats that the next walk records.
// Once it ends, its outcome waits here until a walk records it in the
// status; then the pool forgets it. A walk whose status is not written
// changes nothing here: what it recorded is taken again by the next one.
package action

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm/internal/metrics"
)

var (
	running   = metrics.Gauges("kfsm_actions_running", "Asynchronous actions running now.", "machine", "action")
	completed = metrics.Counters("kfsm_actions_completed_total", "Asynchronous actions that succeeded.", "machine", "action")
	failed    = metrics.Counters("kfsm_actions_failed_total", "Asynchronous actions that failed or panicked.", "machine", "action")
	durations = metrics.Register(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kfsm_action_duration_seconds",
		Help: "Time the work of asynchronous actions took, observed when it ends, by outcome (succeeded, failed).",
		// Actions span sub-second calls to jobs of hours: 0.1 s to 7 h.
		Buckets: prometheus.ExponentialBuckets(0.1, 4, 10),
	}, []string{"machine", "action", "outcome"}))
)

// Key names an action: the object and the action's name.
type Key struct {
	Object types.NamespacedName
	Name   string
}

// Job is one run of an action, as package fsm wraps the author's
// functions.
type Job struct {
	// Observe, when set, runs first: it asks the world whether an earlier
	// run under the same record took effect. Done ends the run as
	// succeeded without Work; not done runs Work; an error asks again
	// after a backoff, for as long as it takes.
	Observe func(ctx context.Context, h *Handle) (done bool, err error)
	Work    func(ctx context.Context, h *Handle) error
	// Deadline, when set, ends the run's context then.
	Deadline time.Time
	// Heartbeat, when positive, is how often the run's heartbeat is
	// recorded while it runs.
	Heartbeat time.Duration
	// Progress is the checkpoint that the run resumes from.
	Progress string
	// Kind labels the run's metrics: a name from a bounded set, never
	// one made at run time.
	Kind string
}

// Handle is what a run reports through while it runs.
type Handle struct {
	// Result is the run's result, set by its work before it returns.
	Result string
	pool   *Pool
	key    Key
	r      *run
}

// Checkpoint hands progress to the next walk, which records it in the
// status, and returns once the status holds it, the run is cancelled or
// ctx ends.
func (h *Handle) Checkpoint(ctx context.Context, progress string) error {
	p := h.pool
	p.mu.Lock()
	h.r.progress = progress
	h.r.checkpoints++
	want := h.r.checkpoints
	h.r.beat = p.clock.Now()
	p.mu.Unlock()
	p.wake(h.key.Object)
	for {
		p.mu.Lock()
		saved, ch := h.r.saved, h.r.savedCh
		p.mu.Unlock()
		if saved >= want {
			return nil
		}
		select {
		case <-ch:
		case <-h.r.ctx.Done():
			return h.r.ctx.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// View is where a run stands, for the walk that records it.
type View struct {
	Ended    bool
	Err      error // the failure of an ended run
	Result   string
	Progress string
	Beat     time.Time // the last heartbeat or checkpoint; zero before either
}

type phase uint8

const (
	prepared phase = iota
	started
	ended
)

type run struct {
	uid      types.UID
	record   string // the key of the record in the status
	phase    phase
	job      Job
	deleting bool // started on the deletion path
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed when the run has returned

	err                error // set when it ends
	result             string
	progress           string
	checkpoints, saved uint64 // checkpoints made, and recorded by a written walk
	savedCh            chan struct{}
	beat               time.Time
	taken              uint64 // the checkpoint the walk in progress records
	recorded, left     bool   // the walk in progress records its outcome, or leaves its state
}

// Pool runs a machine's actions.
type Pool struct {
	machine string
	slots   chan struct{} // one per action that may run at once
	log     logr.Logger
	redact  func(string) string
	clock   clock.PassiveClock
	// Changed is told when a run starts (ended false) and ends.
	changed func(k Key, record string, ended bool, err error)

	mu       sync.Mutex
	runs     map[types.NamespacedName]map[string]*run
	running  map[string]int // runs by kind, for the gauge
	base     context.Context
	stop     context.CancelFunc
	queue    workqueue.TypedRateLimitingInterface[reconcile.Request]
	returned sync.WaitGroup // the runs launched and not returned
}

// New makes a pool in which limit actions run at once.
func New(machine string, limit int, log logr.Logger, redact func(string) string, clk clock.PassiveClock, changed func(Key, string, bool, error)) *Pool {
	base, stop := context.WithCancel(context.Background())
	return &Pool{
		machine: machine, slots: make(chan struct{}, max(limit, 1)), log: log, redact: redact, clock: clk, changed: changed,
		runs: map[types.NamespacedName]map[string]*run{}, running: map[string]int{}, base: base, stop: stop,
	}
}

// Start is the source that the controller registers: it gives the pool
// the controller's queue, and cancels every run when the manager stops.
func (p *Pool) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	p.mu.Lock()
	p.queue = q
	p.mu.Unlock()
	go func() {
		<-ctx.Done()
		p.stop()
	}()
	return nil
}

// Drain is a runnable of the manager: when the manager stops, it cancels
// every run and waits until they have returned, so that no action's work
// goes on once the process's manager has stopped.
func (p *Pool) Drain(ctx context.Context) error {
	<-ctx.Done()
	p.mu.Lock()
	p.stop()
	p.mu.Unlock()
	p.returned.Wait()
	return nil
}

func (p *Pool) get(k Key) *run { return p.runs[k.Object][k.Name] }

// Take reports the run of k under the record's key, if this process has
// one, and notes that the walk in progress records what it reports.
func (p *Pool) Take(k Key, record string) (View, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.get(k)
	if r == nil || r.record != record {
		return View{}, false
	}
	v := View{Progress: r.progress, Beat: r.beat}
	r.taken = r.checkpoints
	if r.phase == ended {
		r.recorded = true
		v.Ended = true
		v.Err, v.Result = r.err, r.result
	}
	return v, true
}

// Prepare registers a run of k under the record's key, to be launched
// when the walk in progress is written. A run of k already known is
// cancelled: the walk replaced its record. Should the walk not be
// written, the old record stays without a run, as after a restart.
func (p *Pool) Prepare(k Key, uid types.UID, record string, deleting bool, job Job) {
	p.mu.Lock()
	defer p.mu.Unlock()
	byName := p.runs[k.Object]
	if byName == nil {
		byName = map[string]*run{}
		p.runs[k.Object] = byName
	}
	if old := byName[k.Name]; old != nil {
		old.cancel()
	}
	ctx, cancel := context.WithCancel(p.base)
	if !job.Deadline.IsZero() {
		ctx, cancel = context.WithDeadline(p.base, job.Deadline)
	}
	byName[k.Name] = &run{uid: uid, record: record, job: job, deleting: deleting, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), progress: job.Progress, savedCh: make(chan struct{})}
}

// Leave notes that the walk in progress drops k's record, its state left:
// once the walk is written, the run is cancelled and forgotten.
func (p *Pool) Leave(k Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.get(k); r != nil {
		r.left = true
	}
}

// Settle ends a walk of obj. After a written walk, prepared runs start,
// runs whose outcome it recorded are forgotten, the checkpoints it
// recorded are acknowledged and the runs of states it left are cancelled.
// After a walk that was not written, what it noted is undone.
func (p *Pool) Settle(obj types.NamespacedName, written bool) {
	var launched []Key
	var runs []*run
	p.mu.Lock()
	// Once the manager stops, nothing starts: Drain waits for what did.
	stopping := p.base.Err() != nil
	byName := p.runs[obj]
	for name, r := range byName {
		k := Key{Object: obj, Name: name}
		switch {
		case !written || stopping && r.phase == prepared:
			if r.phase == prepared {
				delete(byName, name)
				continue
			}
			r.recorded, r.left, r.taken = false, false, r.saved
		case r.left:
			r.cancel()
			delete(byName, name)
		case r.phase == prepared:
			r.phase = started
			launched = append(launched, k)
			runs = append(runs, r)
		case r.recorded:
			delete(byName, name)
		case r.taken > r.saved:
			r.saved = r.taken
			close(r.savedCh)
			r.savedCh = make(chan struct{})
		}
	}
	if len(byName) == 0 {
		delete(p.runs, obj)
	}
	p.returned.Add(len(runs))
	p.mu.Unlock()
	for i, k := range launched {
		if p.changed != nil {
			p.changed(k, runs[i].record, false, nil) // before the run can report its end
		}
		go p.run(k, runs[i])
	}
}

// Cancel stops the runs of an object: all of them when it is gone, or
// those started before its deletion began when it is being deleted.
func (p *Pool) Cancel(obj types.NamespacedName, keepDeletion bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, r := range p.runs[obj] {
		if !keepDeletion || !r.deleting {
			r.cancel()
			delete(p.runs[obj], name)
		}
	}
	if len(p.runs[obj]) == 0 {
		delete(p.runs, obj)
	}
}

// CancelSlots stops the runs of the objects whose slot lost reports as
// given up, and returns, by slot, channels that close once they have
// returned. What they did stays unrecorded: the replica that takes the
// slots finds their records without an outcome.
func (p *Pool) CancelSlots(lost func(types.UID) (slot int, gone bool)) map[int][]<-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	done := map[int][]<-chan struct{}{}
	for obj, byName := range p.runs {
		for name, r := range byName {
			if slot, gone := lost(r.uid); gone {
				r.cancel()
				delete(byName, name)
				if r.phase != prepared {
					done[slot] = append(done[slot], r.done)
				}
			}
		}
		if len(byName) == 0 {
			delete(p.runs, obj)
		}
	}
	return done
}

func (p *Pool) run(k Key, r *run) {
	defer p.returned.Done()
	defer close(r.done)
	ctx := r.ctx
	h := &Handle{pool: p, key: k, r: r}
	if !p.acquire(ctx) {
		return
	}
	p.count(r.job.Kind, 1)
	stopBeat := p.heartbeat(k, r)
	began := time.Now() // real time: how long the work held a slot
	held, err := p.work(ctx, h)
	took := time.Since(began)
	stopBeat()
	p.count(r.job.Kind, -1)
	if held {
		<-p.slots
	}

	p.mu.Lock()
	if p.get(k) != r || (ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded)) {
		// Cancelled: the object went, its state was left, its slot was
		// given up or the manager stopped.
		p.mu.Unlock()
		return
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && err != nil {
		err = fmt.Errorf("the action passed its deadline: %w", err)
	}
	r.phase, r.err, r.result = ended, err, h.Result
	p.mu.Unlock()
	outcome := "succeeded"
	if err != nil {
		outcome = "failed"
	}
	durations.WithLabelValues(p.machine, r.job.Kind, outcome).Observe(took.Seconds())
	if err != nil {
		failed.WithLabelValues(p.machine, r.job.Kind).Inc()
		p.log.Error(p.redacted(err), "action failed", "machine", p.machine, "object", k.Object.String(), "action", k.Name, "key", r.record)
	} else {
		completed.WithLabelValues(p.machine, r.job.Kind).Inc()
	}
	if p.changed != nil {
		p.changed(k, r.record, true, err)
	}
	p.wake(k.Object) // at once, not after a requeue timer
}

// work observes, if the job asks, and then works, in a slot of the pool;
// held says whether it still holds one when it returns.
func (p *Pool) work(ctx context.Context, h *Handle) (held bool, err error) {
	job := h.r.job
	if job.Observe != nil {
		for delay := time.Second; ; delay = min(2*delay, 5*time.Minute) {
			done, err := safely(func() (bool, error) { return job.Observe(ctx, h) })
			if err == nil && done {
				return true, nil
			}
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
			p.log.Info("could not tell whether an interrupted action took effect; asking again", "machine", p.machine,
				"object", h.key.Object.String(), "action", h.key.Name, "key", h.r.record, "after", delay, "error", p.redacted(err).Error())
			<-p.slots // another action may run meanwhile
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(delay):
			}
			if !p.acquire(ctx) {
				return false, ctx.Err()
			}
		}
	}
	_, err = safely(func() (bool, error) { return false, job.Work(ctx, h) })
	return true, err
}

// redacted is err as the pool logs it.
func (p *Pool) redacted(err error) error {
	if p.redact == nil {
		return err
	}
	return errors.New(p.redact(err.Error()))
}

func (p *Pool) acquire(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case p.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// heartbeat records a beat every Heartbeat while the run works, and wakes
// the object so that a walk records it.
func (p *Pool) heartbeat(k Key, r *run) (stop func()) {
	if r.job.Heartbeat <= 0 {
		return func() {}
	}
	t := time.NewTicker(r.job.Heartbeat)
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			p.mu.Lock()
			r.beat = p.clock.Now()
			p.mu.Unlock()
			p.wake(k.Object)
		}
	}()
	return func() { t.Stop(); close(quit) }
}

func (p *Pool) wake(obj types.NamespacedName) {
	p.mu.Lock()
	q := p.queue
	p.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: obj})
	}
}

// count keeps kfsm_actions_running, by kind.
func (p *Pool) count(kind string, delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running[kind] += delta
	running.WithLabelValues(p.machine, kind).Set(float64(p.running[kind]))
}

func safely(f func() (bool, error)) (done bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("action panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return f()
}
