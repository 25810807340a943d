// Package eventwriter writes a machine's Kubernetes events in the
// background, as series, through the events.k8s.io API, in place of
// client-go's events broadcaster: package fsm records every event of its
// machines under a manager through a Writer.
package eventwriter

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/reference"
)

// Writer writes a machine's events to the events.k8s.io API, in the
// background, in place of client-go's events broadcaster, and remembers
// less.
//
// Isomorphic events (the same type, reason, action, and regarding and
// related object at the same resourceVersion, as client-go has them) are
// one Event with a series, as the events API has them: the second is
// written at once as a series of two; later ones are counted and written
// at most once per Options.PatchEvery; a series quiet for
// Options.SeriesWindow is
// forgotten, and the next one starts a new Event. For each Event it keeps
// a digest of what makes events isomorphic, the Event's name and the
// counts, about 150 bytes; the broadcaster keeps a whole copy of every
// Event, about 700, for six minutes or more.
//
// A few goroutines write from a bounded queue. When the queue is full, as
// when the API server refuses events for long, a new event is dropped, and
// the drops are logged.
type Writer struct {
	events     typedeventsv1.EventsV1Interface
	scheme     *runtime.Scheme
	controller string
	instance   string
	log        logr.Logger
	o          Options

	mu      sync.Mutex
	queue   []eventWrite
	series  map[eventKey]*eventSeries
	dropped int
	ready   chan struct{} // has a value while the queue is not empty
}

const (
	eventWriters   = 4 // goroutines that write
	maxEventTries  = 5
	eventStopGrace = 5 * time.Second // to write what waits when the manager stops
)

// eventKey is a digest of what makes events isomorphic.
type eventKey [16]byte

// eventSeries is what the writer remembers of an Event it wrote.
type eventSeries struct {
	namespace, name string
	count           int32 // occurrences so far
	written         int32 // the count the API server has
	created         bool  // the Event was created: its series can be written
	writing         bool  // a write of the series waits or is being made
	last            time.Time
	nextPatch       time.Time
}

// eventWrite is a write that waits: a new Event, or else the series, of
// key and of the Event named name.
type eventWrite struct {
	event *eventsv1.Event
	key   eventKey
	name  string
}

// Options time a Writer and bound its queue; each that is zero takes its
// default.
type Options struct {
	// PatchEvery is how often a series is written at most; 10 s.
	PatchEvery time.Duration
	// SeriesWindow is how long a series stays quiet before the next
	// occurrence starts another Event; six minutes.
	SeriesWindow time.Duration
	// RetryAfter is how long a write that may succeed later waits before
	// it is tried again; 2 s.
	RetryAfter time.Duration
	// QueueLimit is how many writes may wait; 1,024.
	QueueLimit int
}

// New returns a writer of the events of controller, which reports them as
// its ReportingController, through events; it writes once started (see
// Start).
func New(events typedeventsv1.EventsV1Interface, scheme *runtime.Scheme, controller string, log logr.Logger, o Options) *Writer {
	hostname, _ := os.Hostname()
	o.PatchEvery = cmp.Or(o.PatchEvery, 10*time.Second)
	o.SeriesWindow = cmp.Or(o.SeriesWindow, 6*time.Minute)
	o.RetryAfter = cmp.Or(o.RetryAfter, 2*time.Second)
	o.QueueLimit = cmp.Or(o.QueueLimit, 1024)
	return &Writer{
		events: events, scheme: scheme, controller: controller, instance: controller + "-" + hostname, log: log, o: o,
		series: map[eventKey]*eventSeries{},
		ready:  make(chan struct{}, 1),
	}
}

// Eventf records an event; it never waits for the API server.
func (w *Writer) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		w.log.Error(nil, "an event of an unknown type is not recorded", "type", eventtype, "reason", reason)
		return
	}
	ref, err := reference.GetReference(w.scheme, regarding)
	if err != nil {
		w.log.Error(err, "an event about an object without a reference is not recorded", "reason", reason)
		return
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		relatedRef, _ = reference.GetReference(w.scheme, related) // an event without it says the rest
	}
	key := keyOfEvent(eventtype, reason, action, ref, relatedRef)
	now := time.Now()

	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.series[key]; s != nil && now.Sub(s.last) < w.o.SeriesWindow {
		s.count++
		s.last = now
		if s.created && !s.writing && !now.Before(s.nextPatch) && w.enqueue(eventWrite{key: key, name: s.name}) {
			s.writing = true
		}
		return
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: cmp.Or(ref.Namespace, metav1.NamespaceDefault), Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano())},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: w.controller,
		ReportingInstance:   w.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             relatedRef,
		Note:                fmt.Sprintf(note, args...),
		Type:                eventtype,
	}
	if !w.enqueue(eventWrite{event: ev, key: key, name: ev.Name}) {
		return
	}
	w.series[key] = &eventSeries{namespace: ev.Namespace, name: ev.Name, count: 1, written: 1, last: now}
}

// keyOfEvent digests the fields that make two events isomorphic.
func keyOfEvent(eventtype, reason, action string, regarding, related *corev1.ObjectReference) eventKey {
	b := make([]byte, 0, 256)
	for _, f := range []string{eventtype, reason, action} {
		b = append(append(b, f...), 0)
	}
	for _, r := range []*corev1.ObjectReference{regarding, related} {
		if r == nil {
			b = append(b, 0)
			continue
		}
		for _, f := range []string{r.APIVersion, r.Kind, r.Namespace, r.Name, string(r.UID), r.ResourceVersion, r.FieldPath} {
			b = append(append(b, f...), 0)
		}
	}
	sum := sha256.Sum256(b)
	return eventKey(sum[:16])
}

// enqueue adds a write to the queue, unless it is full; w.mu is held.
func (w *Writer) enqueue(wr eventWrite) bool {
	if len(w.queue) >= w.o.QueueLimit {
		w.dropped++
		return false
	}
	w.queue = append(w.queue, wr)
	select {
	case w.ready <- struct{}{}:
	default:
	}
	return true
}

// next takes the oldest write from the queue.
func (w *Writer) next() (eventWrite, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return eventWrite{}, false
	}
	wr := w.queue[0]
	w.queue[0] = eventWrite{}
	w.queue = w.queue[1:]
	if len(w.queue) > 0 {
		select {
		case w.ready <- struct{}{}:
		default:
		}
	}
	return wr, true
}

// NeedLeaderElection is false: the writer writes what this process's
// reconcilers record, leader or not.
func (w *Writer) NeedLeaderElection() bool { return false }

// Start writes until ctx ends. Then the writes in flight, and those that
// wait, have eventStopGrace to finish.
func (w *Writer) Start(ctx context.Context) error {
	writes, cancelWrites := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWrites()
	var wg sync.WaitGroup
	for range eventWriters {
		wg.Go(func() { w.work(writes, ctx.Done()) })
	}
	tick := time.NewTicker(w.o.PatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			grace := time.AfterFunc(eventStopGrace, cancelWrites)
			defer grace.Stop()
			wg.Wait()
			w.mu.Lock()
			defer w.mu.Unlock()
			w.logDrops()
			return nil
		case now := <-tick.C:
			w.sweep(now)
		}
	}
}

// work writes from the queue until stop, and then, without trying any
// write again, until the queue is empty or ctx ends.
func (w *Writer) work(ctx context.Context, stop <-chan struct{}) {
	for ctx.Err() == nil {
		wr, ok := w.next()
		if ok {
			w.write(ctx, stop, wr)
			continue
		}
		select {
		case <-stop:
			return
		case <-w.ready:
		}
	}
}

// sweep queues the series that counted more than they wrote, forgets those
// quiet for SeriesWindow, and logs the drops.
func (w *Writer) sweep(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, s := range w.series {
		switch {
		case s.writing, !s.created:
		case s.count > s.written:
			if w.enqueue(eventWrite{key: key, name: s.name}) {
				s.writing = true
			}
		case now.Sub(s.last) >= w.o.SeriesWindow:
			delete(w.series, key)
		}
	}
	w.logDrops()
}

// logDrops logs the events dropped since it last did; w.mu is held.
func (w *Writer) logDrops() {
	if w.dropped > 0 {
		w.log.Error(nil, "events were dropped: too many waited to be written", "dropped", w.dropped)
		w.dropped = 0
	}
}

// write makes one write, trying again a few times, until stop, when the
// API server cannot be reached or asks to wait.
func (w *Writer) write(ctx context.Context, stop <-chan struct{}, wr eventWrite) {
	err := w.writeOnce(ctx, wr)
	for try := 1; err != nil && try < maxEventTries && retriable(err); try++ {
		select {
		case <-ctx.Done():
		case <-stop:
		case <-time.After(w.o.RetryAfter):
			err = w.writeOnce(ctx, wr)
			continue
		}
		break
	}
	w.ended(wr, err == nil)
	if err != nil && ctx.Err() == nil {
		w.log.Error(err, "writing an event")
	}
}

func (w *Writer) writeOnce(ctx context.Context, wr eventWrite) error {
	// The API server's answers are not read: nothing in them is needed.
	if wr.event != nil {
		err := w.events.RESTClient().Post().Namespace(wr.event.Namespace).Resource("events").Body(wr.event).Do(ctx).Error()
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	w.mu.Lock()
	s := w.series[wr.key]
	if s == nil || s.name != wr.name { // the series ended
		w.mu.Unlock()
		return nil
	}
	s.nextPatch = time.Now().Add(w.o.PatchEvery)
	namespace, name, count, last := s.namespace, s.name, s.count, s.last
	w.mu.Unlock()

	patch, err := json.Marshal(map[string]any{"series": eventsv1.EventSeries{Count: count, LastObservedTime: metav1.NewMicroTime(last)}})
	if err != nil {
		return err
	}
	err = w.events.RESTClient().Patch(types.MergePatchType).Namespace(namespace).Resource("events").Name(name).Body(patch).Do(ctx).Error()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case apierrors.IsNotFound(err):
		// Someone deleted the Event: the next occurrence starts another.
		if w.series[wr.key] == s {
			delete(w.series, wr.key)
		}
		return nil
	case err == nil:
		s.written = max(s.written, count)
	}
	return err
}

// ended ends a write, after its last try. A new Event's series may be
// written now; a series written meanwhile is written again by the sweep.
// A write that failed for good ends its series: the next occurrence
// starts another Event.
func (w *Writer) ended(wr eventWrite, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.series[wr.key]
	switch {
	case s == nil || s.name != wr.name: // the series ended; this key may have another
	case !ok:
		delete(w.series, wr.key)
	case wr.event != nil:
		s.created = true
		if s.count > s.written && !s.writing && w.enqueue(eventWrite{key: wr.key, name: s.name}) {
			s.writing = true
		}
	default:
		s.writing = false
	}
}

// retriable reports whether a write that failed with err may succeed later.
func retriable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // the API server was not reached
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}
