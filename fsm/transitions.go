package fsm

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// move makes next the persisted state (lifecycle, or a pipeline's resting
// state) and keeps the transition to make it visible at commit.
func (w *walker[T]) move(next State, reason string) {
	from := w.st.State
	if from == next {
		return
	}
	spent := time.Duration(-1)
	if from != "" && w.st.StateSince != nil {
		spent = w.now.Sub(w.st.StateSince.Time)
	}
	since := metav1.NewTime(w.now)
	if w.st.StateSince == nil {
		w.st.StateSince = &metav1.Time{}
	}
	*w.st.StateSince = since
	w.st.State, w.st.Failures, w.st.RetryAt = next, 0, nil
	t := Transition{From: from, To: next, Reason: reason, Time: since, TraceParent: traceParent(w.span.SpanContext())}
	// A full history (as a copy from the cache holds it, with no room
	// to spare) keeps its array: the oldest entries shift out. The limit
	// is at least 1 (Build refuses less), so the latest transition stays:
	// Request.From reads it.
	h := w.st.History
	if keep := w.r.m.historyLimit - 1; len(h) > keep {
		h = h[:copy(h, h[len(h)-keep:])]
	}
	w.st.History = append(h, t)
	w.notices = append(w.notices, notice{moved: true, t: t, spent: spent})
}

// rest records where a pipeline pass ended; lifecycle machines move as
// they go, so for them it changes nothing.
func (w *walker[T]) rest(cur State, reason string) {
	if w.r.m.mode == Pipeline {
		w.move(cur, reason)
	}
}

// notice is a transition or an event that a walk makes visible once the
// status that records it is written, so that a write that fails reports
// nothing that did not happen.
type notice struct {
	moved bool
	t     Transition
	spent time.Duration // in the state left, or -1 when unknown

	eventtype, reason, action, note string
	related                         runtime.Object
}

// notify keeps an event for commit.
func (w *walker[T]) notify(eventtype, reason, action, note string, related runtime.Object) {
	w.notices = append(w.notices, notice{eventtype: eventtype, reason: reason, action: action, note: note, related: related})
}

// later keeps a log line for commit.
func (w *walker[T]) later(f func()) { w.logs = append(w.logs, f) }

// commit makes the walk visible, once its status is written: each
// transition is counted, logged, recorded as an event and told to the
// observers, once.
func (w *walker[T]) commit() {
	r := w.r
	for _, f := range w.logs {
		f()
	}
	for i := range w.notices {
		n := &w.notices[i]
		if !n.moved {
			r.event(w.obj, n.related, n.eventtype, n.reason, n.action, n.note)
			continue
		}
		t := n.t
		if w.span.IsRecording() {
			spanTransition(w.span, t)
		}
		rec := r.b.moveOf(t)
		rec.count.Inc()
		if n.spent >= 0 && rec.left != nil {
			rec.left.Observe(n.spent.Seconds())
		}
		if w.log.Enabled() {
			w.log.Info("transition", "machine", r.m.name, "object", client.ObjectKeyFromObject(w.obj).String(), "from", t.From, "to", t.To, "reason", t.Reason)
		}
		r.recorder.Eventf(w.obj, nil, rec.eventtype, rec.eventReason, rec.action, rec.note)
		if len(r.m.observers) > 0 {
			// A typed object that the client decoded has no kind.
			w.obj.GetObjectKind().SetGroupVersionKind(r.gvk)
		}
		for _, observe := range r.m.observers {
			observe(w.ctx, w.obj, t)
		}
	}
}
