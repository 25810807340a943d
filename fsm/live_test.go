package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
)

// live is a machine running under a real manager against the test's API
// server, the way operators run, with what a test counts over time: the
// writes of the manager's client, the lines the manager logs, and faults
// to inject into the client's calls.
type live struct {
	op        *fsmtest.Operator
	writes    atomic.Int64 // every write: finalizers, status, children
	status    atomic.Int64 // status writes
	published atomic.Int64 // writes that publish the machine's graph
	logs      *logLines

	mu     sync.Mutex
	faults []*fault
	stale  func(client.ObjectKey, client.Object) // may serve an old copy instead
	sync   time.Duration                         // the cache's resync period, if set
	gate   *watchGate                            // may hold the watch events of one resource
	lean   bool                                  // the manager's cache is fsm.LeanCache's
	client client.Client                         // the manager's client: its reads are the cache's
}

// fault fails one call of the manager's client that matches: before the
// call is sent, or, if it lands, after the API server took it, as a
// timeout or a lost connection does.
type fault struct {
	op     string // "status", "delete", "apply", "patch", "publish" (of the graph)
	match  func(client.Object) bool
	err    error
	times  int  // how many calls it fails
	landed bool // the call is made and its answer lost
}

// run starts m under fsmtest's manager, which sees the test's namespace,
// with the manager's client and logger those of live.
func run[T fsm.Object](e *env, m *fsm.Machine[T], opts ...func(*live)) *live {
	e.t.Helper()
	return runFunc(e, func(*fsmtest.Env) *fsm.Machine[T] { return m }, opts...)
}

// runFunc is run with a machine made anew for each process of the
// operator, as l.op.Restart starts one.
func runFunc[T fsm.Object](e *env, machine func(*fsmtest.Env) *fsm.Machine[T], opts ...func(*live)) *live {
	e.t.Helper()
	l := &live{logs: &logLines{}}
	for _, o := range opts {
		o(l)
	}
	l.op = fsmtest.RunFunc(e.fe, machine, fsmtest.WithManagerOptions(func(o *ctrl.Options) {
		o.Logger = logr.New(l.logs.sink())
		o.NewClient = l.newClient
		if l.sync > 0 {
			o.Cache.SyncPeriod = &l.sync
		}
		if l.gate != nil {
			o.NewCache = func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
				cfg = rest.CopyConfig(cfg)
				cfg.Wrap(l.gate.wrap)
				hc, err := rest.HTTPClientFor(cfg)
				if err != nil {
					return nil, err
				}
				opts.HTTPClient = hc
				return cache.New(cfg, opts)
			}
		}
		if l.lean {
			fsm.LeanCache(o)
		} else if o.NewCache == nil {
			o.NewCache = cache.New // controller-runtime's own, not fsmtest's default of LeanCache's
		}
	}))
	return l
}

// withResync makes the manager's cache resync every d: every object gets
// an update event that changes nothing.
func withResync(d time.Duration) func(*live) { return func(l *live) { l.sync = d } }

// withLeanCache gives the manager fsm.LeanCache's cache.
func withLeanCache() func(*live) { return func(l *live) { l.lean = true } }

// withWatchGate lets g hold the watch events that reach the manager's
// cache.
func withWatchGate(g *watchGate) func(*live) { return func(l *live) { l.gate = g } }

// watchGate holds the watch events of one resource while closed, as a
// watch that has fallen behind does: the cache keeps the versions it
// had, and the events come when the gate opens.
type watchGate struct {
	resource string // as in the API's paths: "configmaps"
	mu       sync.RWMutex
}

// hold closes the gate: events that arrive from now on wait.
func (g *watchGate) hold() { g.mu.Lock() }

// release opens it again.
func (g *watchGate) release() { g.mu.Unlock() }

func (g *watchGate) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && req.URL.Query().Get("watch") == "true" && strings.HasSuffix(req.URL.Path, "/"+g.resource) {
			resp.Body = &gatedBody{ReadCloser: resp.Body, gate: g}
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// gatedBody passes on what it reads only while its gate is open.
type gatedBody struct {
	io.ReadCloser
	gate *watchGate
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.gate.mu.RLock()
	defer b.gate.mu.RUnlock()
	return n, err
}

// inject makes the next calls of the manager's client that match fail.
func (l *live) inject(f *fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, f)
}

// lift ends f: the calls that it would have failed succeed from now on.
func (l *live) lift(f *fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f.times = 0
}

// fault returns the fault that the next call of op on obj meets, if any.
func (l *live) fault(op string, obj client.Object) *fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.faults {
		if f.op == op && f.times > 0 && (f.match == nil || f.match(obj)) {
			f.times--
			return f
		}
	}
	return nil
}

// call makes a call of op on obj through do, unless a fault fails it.
func (l *live) call(op string, obj client.Object, do func() error) error {
	f := l.fault(op, obj)
	if f != nil && !f.landed {
		return f.err
	}
	err := do()
	if err == nil && f != nil {
		return f.err
	}
	return err
}

func (l *live) newClient(cfg *rest.Config, opts client.Options) (client.Client, error) {
	c, err := client.NewWithWatch(cfg, opts)
	if err != nil {
		return nil, err
	}
	write := func(op string, obj client.Object, do func() error) error {
		return l.call(op, obj, func() error {
			l.writes.Add(1)
			return do()
		})
	}
	wrapped := interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			l.mu.Lock()
			stale := l.stale
			l.mu.Unlock()
			if stale != nil {
				stale(key, obj)
			}
			return nil
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return write("create", obj, func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return write("update", obj, func() error { return c.Update(ctx, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if obj.GetObjectKind().GroupVersionKind().Kind == "CustomResourceDefinition" {
				// The machine's graph, not a write of the loop.
				return l.call("publish", obj, func() error {
					l.published.Add(1)
					return c.Patch(ctx, obj, patch, opts...)
				})
			}
			return write("patch", obj, func() error { return c.Patch(ctx, obj, patch, opts...) })
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			return write("apply", nil, func() error { return c.Apply(ctx, obj, opts...) })
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			return write("delete", obj, func() error { return c.Delete(ctx, obj, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return write(sub, obj, func() error {
				l.status.Add(1)
				return c.SubResource(sub).Update(ctx, obj, opts...)
			})
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			return write(sub, obj, func() error {
				l.status.Add(1)
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			})
		},
	})
	l.mu.Lock()
	l.client = wrapped
	l.mu.Unlock()
	return wrapped, nil
}

// cached reads obj as the manager's cache holds it.
func (l *live) cached(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	l.mu.Lock()
	c := l.client
	l.mu.Unlock()
	return c.Get(ctx, key, obj)
}

// runs records when a handler ran, and on which copy of the object.
type runs struct {
	mu  sync.Mutex
	at  []time.Time
	rvs []string
}

func (r *runs) record(req *request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, time.Now())
	r.rvs = append(r.rvs, req.Object.ResourceVersion)
}

func (r *runs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}

func (r *runs) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.at)
}

// counted wraps a handler so that its runs are recorded.
func counted(r *runs, h func(context.Context, *request) fsm.Result) func(context.Context, *request) fsm.Result {
	return func(ctx context.Context, req *request) fsm.Result {
		r.record(req)
		return h(ctx, req)
	}
}

// apiEvents lists the events that the API server holds about gadget "g",
// as kubectl get events shows them.
func (e *env) apiEvents() []eventsv1.Event {
	e.t.Helper()
	var list eventsv1.EventList
	if err := e.direct.List(e.t.Context(), &list, client.InNamespace(e.namespace)); err != nil {
		e.t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Name == "g" && ev.Regarding.Kind == "Gadget" {
			out = append(out, ev)
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out
}

// occurrences counts the events with reason, series included.
func occurrences(events []eventsv1.Event, reason string) int {
	n := 0
	for _, ev := range events {
		if ev.Reason != reason {
			continue
		}
		if ev.Series != nil {
			n += int(ev.Series.Count)
		} else {
			n++
		}
	}
	return n
}

// logLines keeps what a manager logs, from all its loggers.
type logLines struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level int // -1 for errors
	msg   string
	err   error
	kv    []any
}

func (l *logLines) all() []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// errors returns the error lines.
func (l *logLines) errors() []logLine {
	var out []logLine
	for _, line := range l.all() {
		if line.level < 0 {
			out = append(out, line)
		}
	}
	return out
}

func (l *logLines) sink() logr.LogSink { return &logSink{store: l} }

// logSink is a logr.LogSink that writes into a logLines.
type logSink struct {
	store *logLines
	kv    []any
}

func (s *logSink) Init(logr.RuntimeInfo)        {}
func (s *logSink) Enabled(level int) bool       { return level <= 1 }
func (s *logSink) WithName(string) logr.LogSink { return s }
func (s *logSink) WithValues(kv ...any) logr.LogSink {
	return &logSink{store: s.store, kv: append(slices.Clone(s.kv), kv...)}
}

func (s *logSink) Info(level int, msg string, kv ...any) {
	s.add(logLine{level: level, msg: msg, kv: append(slices.Clone(s.kv), kv...)})
}

func (s *logSink) Error(err error, msg string, kv ...any) {
	s.add(logLine{level: -1, msg: msg, err: err, kv: append(slices.Clone(s.kv), kv...)})
}

func (s *logSink) add(line logLine) {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	s.store.lines = append(s.store.lines, line)
}

func (line logLine) String() string {
	return fmt.Sprintf("level %d %q err=%v %v", line.level, line.msg, line.err, line.kv)
}

// value returns the value logged with key, as text.
func (line logLine) value(key string) string {
	for i := 0; i+1 < len(line.kv); i += 2 {
		if line.kv[i] == key {
			return fmt.Sprint(line.kv[i+1])
		}
	}
	return ""
}

// lateness is how much later than its backoff an attempt may come: a
// loaded machine delays the status write and the queue behind an attempt,
// which can make a backoff late but never early.
const lateness = 500 * time.Millisecond

// wantAttemptsAt fails unless the attempts came at the given offsets from
// the first, in seconds, within 20 %, or up to lateness later.
func wantAttemptsAt(t *testing.T, at []time.Time, offsets ...float64) {
	t.Helper()
	var got []string
	for _, a := range at {
		got = append(got, fmt.Sprintf("%.2fs", a.Sub(at[0]).Seconds()))
	}
	if len(at) != len(offsets) {
		t.Fatalf("%d attempts at %v, want %d at %v s", len(at), got, len(offsets), offsets)
	}
	for i, want := range offsets {
		if d := at[i].Sub(at[0]).Seconds(); d < want*0.8 || d > want*1.2+lateness.Seconds() {
			t.Errorf("attempt %d came at %.2fs, want %.0fs -20%%/+20%%+%v (all: %v)", i+1, d, want, lateness, got)
		}
	}
	t.Logf("attempts at %v", got)
}

// touch changes a label of the gadget every interval until the returned
// function is called: changes by someone else, which reconcile the object
// at once but must not hurry a backoff.
func (e *env) touch(name string, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(e.t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			patch := fmt.Appendf(nil, `{"metadata":{"labels":{"touched":"%d"}}}`, i)
			_ = e.direct.Patch(ctx, &gadget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.namespace}}, client.RawPatch(types.MergePatchType, patch))
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (e *env) stalled(name string) bool {
	return meta.IsStatusConditionTrue(e.get(name).Status.Conditions, fsm.ConditionStalled)
}

func (e *env) ready(name string) bool {
	return meta.IsStatusConditionTrue(e.get(name).Status.Conditions, fsm.ConditionReady)
}

func alwaysFails(attempts *runs) func(context.Context, *request) fsm.Result {
	return counted(attempts, func(context.Context, *request) fsm.Result {
		return fsm.Fail(errors.New("the metrics backend is down"))
	})
}
