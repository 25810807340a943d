package fsm

import (
	"errors"
	"strings"
	"time"
	"unicode"

	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// event records an event about regarding, within the events API's limits:
// the note is cut as a whole. The recorder takes a format; a note with no
// % is its own, which costs nothing to pass.
func (r *reconciler[T]) event(regarding T, related runtime.Object, eventtype, reason, action, note string) {
	note = clip(oneLine(note), maxNote)
	if strings.Contains(note, "%") {
		note = strings.ReplaceAll(note, "%", "%%")
	}
	r.recorder.Eventf(regarding, related, eventtype, clip(oneLine(reason), maxReason), clip(oneLine(action), maxAction), note)
}

// oneLine is s with each control character (C0, newlines and tabs
// included, DEL and C1) made a space: what kfsm writes to conditions and
// events is one line, with no escape sequence for a terminal that prints
// it to obey.
func oneLine(s string) string {
	return strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, s)
}

// redact filters a text that came from an error or a handler before kfsm
// writes it anywhere.
func (r *reconciler[T]) redact(s string) string {
	if r.m.redact == nil {
		return s
	}
	return r.m.redact(s)
}

// errorText is an error as conditions, events and spans show it.
func (r *reconciler[T]) errorText(err error) string { return truncate(r.redact(err.Error())) }

// redactedError is err as kfsm returns it to controller-runtime, which
// logs it.
func (r *reconciler[T]) redactedError(err error) error {
	if r.m.redact == nil {
		return err
	}
	return errors.New(r.m.redact(err.Error()))
}

// childRef is an object that events name as related: a child.
func childRef(gvk schema.GroupVersionKind, ref OutputRef) runtime.Object {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID},
	}
}

// related is the child that a handler's failure is about, if any.
func related(err error) runtime.Object {
	var conflict *ConflictError
	var exists *AlreadyExistsError
	switch {
	case errors.As(err, &conflict):
		return childRef(conflict.gvk, conflict.Child)
	case errors.As(err, &exists):
		return childRef(exists.gvk, exists.Child)
	}
	return nil
}

// backoffLimiter is the rate limiter of a machine's controller. An object
// whose handler failed is requeued when kfsm's backoff says; every other
// requeue is the controller's own rate limiter's to time.
type backoffLimiter struct {
	workqueue.TypedRateLimiter[reconcile.Request]

	mu  sync.Mutex
	due map[reconcile.Request]time.Duration
}

func newBackoffLimiter(inner workqueue.TypedRateLimiter[reconcile.Request]) *backoffLimiter {
	return &backoffLimiter{TypedRateLimiter: inner, due: map[reconcile.Request]time.Duration{}}
}

// retryIn sets the delay of the next rate-limited requeue of req.
func (l *backoffLimiter) retryIn(req reconcile.Request, after time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.due[req] = after
}

func (l *backoffLimiter) When(req reconcile.Request) time.Duration {
	l.mu.Lock()
	after, ok := l.due[req]
	delete(l.due, req)
	l.mu.Unlock()
	if ok {
		return after
	}
	return l.TypedRateLimiter.When(req)
}
