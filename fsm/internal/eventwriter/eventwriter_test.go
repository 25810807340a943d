package eventwriter_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"

	"github.com/kfsm/kfsm/fsm/internal/eventwriter"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// eventRequests counts the requests a writer of events makes, by method;
// while unreachable is set, they do not reach the API server, and each
// patch takes patchDelay longer.
type eventRequests struct {
	mu          sync.Mutex
	counts      map[string]int
	unreachable atomic.Bool
	patchDelay  atomic.Int64 // nanoseconds
}

func (c *eventRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if strings.Contains(req.URL.Path, "/events") {
			c.mu.Lock()
			c.counts[req.Method]++
			c.mu.Unlock()
			if c.unreachable.Load() {
				return nil, errors.New("the API server cannot be reached")
			}
			if req.Method == http.MethodPatch {
				time.Sleep(time.Duration(c.patchDelay.Load()))
			}
		}
		return rt.RoundTrip(req)
	})
}

func (c *eventRequests) of(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[method]
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// eventWriter starts kfsm's writer of events with the given timing and
// queue, counting its requests; it stops with the test. It waits
// patchEvery between tries of a write.
func (e *env) eventWriter(patchEvery, window time.Duration, queue int, log logr.Logger) (*eventwriter.Writer, *eventRequests, func()) {
	e.t.Helper()
	requests := &eventRequests{counts: map[string]int{}}
	cfg := rest.CopyConfig(e.fe.Config())
	cfg.Wrap(requests.wrap)
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		e.t.Fatal(err)
	}
	c, err := typedeventsv1.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	w := eventwriter.New(c, scheme, "kfsm.dev/writer-test", log, eventwriter.Options{PatchEvery: patchEvery, SeriesWindow: window, RetryAfter: patchEvery, QueueLimit: queue})
	ctx, cancel := context.WithCancel(context.Background())
	var done chan error // made when the writer starts
	start := func() {
		done = make(chan error, 1)
		go func() { done <- w.Start(ctx) }()
	}
	e.t.Cleanup(func() {
		cancel()
		if done == nil {
			return
		}
		select {
		case err := <-done:
			if err != nil {
				e.t.Error(err)
			}
		case <-time.After(10 * time.Second):
			e.t.Error("the writer did not stop within 10 s")
		}
	})
	return w, requests, start
}

// Repeats of an event are one Event with a series, as the events API has
// them: the second is written at once, later ones together, and a series
// that was quiet long enough ends, so that the next repeat starts another
// Event. Events that differ in reason, related object or the object's
// version are Events of their own.
func TestEventWriterMakesRepeatsOneSeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.gadget()
	const patchEvery, window = 500 * time.Millisecond, 3 * time.Second
	w, requests, start := e.eventWriter(patchEvery, window, 100, logr.Discard())
	start()

	w.Eventf(g, nil, corev1.EventTypeWarning, "Failed", "Analyze", "attempt %d failed", 1)
	await(t, "the first event", func() bool { return len(e.apiEvents()) == 1 })
	first := e.apiEvents()[0]
	if first.Series != nil || first.Note != "attempt 1 failed" || first.Type != corev1.EventTypeWarning ||
		first.ReportingController != "kfsm.dev/writer-test" || first.Regarding.UID != g.UID || first.Action != "Analyze" {
		t.Fatalf("the first event is %+v", first)
	}

	w.Eventf(g, nil, corev1.EventTypeWarning, "Failed", "Analyze", "attempt %d failed", 2)
	await(t, "a series of two", func() bool { return seriesCount(e.apiEvents(), "Failed") == 2 })
	for i := 3; i <= 10; i++ {
		w.Eventf(g, nil, corev1.EventTypeWarning, "Failed", "Analyze", "attempt %d failed", i)
	}
	await(t, "a series of ten", func() bool { return seriesCount(e.apiEvents(), "Failed") == 10 })
	if n := requests.of(http.MethodPost); n != 1 {
		t.Errorf("%d events created for one series, want 1", n)
	}
	// The second occurrence, then at most one write per patchEvery: the
	// eight later ones came at once.
	if n := requests.of(http.MethodPatch); n < 2 || n > 3 {
		t.Errorf("%d patches of the series, want 2 or 3", n)
	}

	child := &corev1.ConfigMap{}
	child.SetNamespace(e.namespace)
	child.SetName("c")
	child.APIVersion, child.Kind = "v1", "ConfigMap"
	w.Eventf(g, nil, corev1.EventTypeNormal, "Next", "Ready", "moved")
	w.Eventf(g, child, corev1.EventTypeWarning, "Failed", "Analyze", "about the child")
	// The same event about a later version of the object is another
	// Event, as client-go has it.
	changed := g.DeepCopy()
	changed.ResourceVersion += "0"
	w.Eventf(changed, nil, corev1.EventTypeWarning, "Failed", "Analyze", "attempt after a change")
	await(t, "four events", func() bool { return len(e.apiEvents()) == 4 })

	time.Sleep(window + 2*patchEvery) // the series ends
	w.Eventf(g, nil, corev1.EventTypeWarning, "Failed", "Analyze", "attempt %d failed", 11)
	await(t, "a new event after the series ended", func() bool { return len(e.apiEvents()) == 5 })
	if n := seriesCount(e.apiEvents(), "Failed"); n != 10 {
		t.Errorf("the ended series counts %d, want 10", n)
	}
}

// seriesCount is the largest series count of the events with reason; an
// event without a series counts 1.
func seriesCount(events []eventsv1.Event, reason string) int32 {
	var most int32
	for _, ev := range events {
		if ev.Reason != reason {
			continue
		}
		n := int32(1)
		if ev.Series != nil {
			n = ev.Series.Count
		}
		most = max(most, n)
	}
	return most
}

// When more events wait than the queue holds, the new ones are dropped,
// and the drops are logged; what was queued is written. Events recorded
// before the writer starts wait for it.
func TestEventWriterDropsWhatItsQueueCannotHoldAndSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.gadget()
	var logged atomic.Value
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, "dropped") {
			logged.Store(args)
		}
	}, funcr.Options{})
	w, requests, start := e.eventWriter(200*time.Millisecond, time.Minute, 3, log)
	for _, reason := range []string{"A", "B", "C", "D", "E"} {
		w.Eventf(g, nil, corev1.EventTypeNormal, reason, "Act", "note")
	}
	start()
	await(t, "the drops logged", func() bool { return logged.Load() != nil })
	if got := logged.Load().(string); !strings.Contains(got, `"dropped"=2`) {
		t.Errorf("the log says %s, want 2 dropped", got)
	}
	var reasons []string
	for _, ev := range e.apiEvents() {
		reasons = append(reasons, ev.Reason)
	}
	if strings.Join(reasons, ",") != "A,B,C" || requests.of(http.MethodPost) != 3 {
		t.Errorf("events %v from %d creates, want A, B and C from 3", reasons, requests.of(http.MethodPost))
	}
}

// A series has one write at a time: a patch slower than patchEvery is not
// sent again beside itself, and the occurrences counted meanwhile are
// written by the next.
func TestEventWriterWritesASeriesOnceAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.gadget()
	const patchEvery = 100 * time.Millisecond
	w, requests, start := e.eventWriter(patchEvery, time.Minute, 100, logr.Discard())
	requests.patchDelay.Store(int64(10 * patchEvery))
	start()
	w.Eventf(g, nil, corev1.EventTypeNormal, "Next", "Ready", "moved")
	await(t, "the event", func() bool { return len(e.apiEvents()) == 1 })
	w.Eventf(g, nil, corev1.EventTypeNormal, "Next", "Ready", "moved")
	await(t, "the first patch", func() bool { return requests.of(http.MethodPatch) >= 1 })
	w.Eventf(g, nil, corev1.EventTypeNormal, "Next", "Ready", "moved")
	await(t, "a series of three", func() bool { return seriesCount(e.apiEvents(), "Next") == 3 })
	time.Sleep(5 * patchEvery) // any write still to come
	if n := requests.of(http.MethodPatch); n != 2 {
		t.Errorf("%d patches for a series of three written twice, want 2", n)
	}
}

// What waits when the writer stops is written within a short grace.
func TestEventWriterWritesWhatWaitsWhenItStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.gadget()
	w, _, _ := e.eventWriter(time.Second, time.Minute, 100, logr.Discard())
	for _, reason := range []string{"A", "B", "C"} {
		w.Eventf(g, nil, corev1.EventTypeNormal, reason, "Act", "note")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(e.apiEvents()); n != 3 {
		t.Errorf("%d events written on stop, want 3", n)
	}
}

// An Event deleted by someone else ends its series: the repeat that finds
// it gone is not written, and the next starts another Event.
func TestEventWriterStartsAnotherEventWhenItsEventIsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.gadget()
	w, requests, start := e.eventWriter(100*time.Millisecond, time.Minute, 100, logr.Discard())
	start()
	w.Eventf(g, nil, corev1.EventTypeNormal, "Next", "Ready", "moved")
	await(t, "the event", func() bool { return len(e.apiEvents()) == 1 })
	gone := e.apiEvents()[0]
	if err := e.direct.Delete(t.Context(), &gone); err != nil {
		t.Fatal(err)
	}
	w.Eventf(g, nil, corev1.EventTypeNormal, "Next", "Ready", "moved")
	await(t, "the patch of the gone event", func() bool { return requests.of(http.MethodPatch) == 1 })
	// Once the writer has heard the answer, the next repeat starts
	// another Event.
	await(t, "another event", func() bool {
		w.Eventf(g, nil, corev1.EventTypeNormal, "Next", "Ready", "moved")
		events := e.apiEvents()
		return len(events) == 1 && events[0].Name != gone.Name
	})
	if n := requests.of(http.MethodPost); n != 2 {
		t.Errorf("%d events created, want 2", n)
	}
}

// A writer whose API server cannot be reached tries again later, but not
// once it is stopped: a process stops at once, not after its retries.
func TestEventWriterStopsWithoutWaitingForItsRetries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.gadget()
	const retryAfter = 30 * time.Second // eventWriter waits patchEvery between tries
	w, requests, _ := e.eventWriter(retryAfter, time.Minute, 100, logr.Discard())
	requests.unreachable.Store(true)
	w.Eventf(g, nil, corev1.EventTypeNormal, "Next", "Ready", "moved")
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Start(ctx) }()
	await(t, "the first try", func() bool { return requests.of(http.MethodPost) == 1 })
	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the writer did not stop within 3 s; it waits for its retry")
	}
	if n := requests.of(http.MethodPost); n != 1 {
		t.Errorf("%d tries, want 1", n)
	}
}
