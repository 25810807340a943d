package fsm

import (
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/fsm/internal/text"
)

const (
	// Condition messages are bounded; errors can be long.
	maxMessage = 1024
	// The events API refuses longer notes, actions and reasons.
	maxNote   = 1024
	maxAction = 128
	maxReason = 128
)

// event records an event about regarding, within the events API's limits:
// the note is cut as a whole. The recorder takes a format; a note with no
// % is its own, which costs nothing to pass.
func (r *reconciler[T]) event(regarding T, related runtime.Object, eventtype, reason, action, note string) {
	note = text.Clip(text.OneLine(note), maxNote)
	if strings.Contains(note, "%") {
		note = strings.ReplaceAll(note, "%", "%%")
	}
	r.recorder.Eventf(regarding, related, eventtype, text.Clip(text.OneLine(reason), maxReason), text.Clip(text.OneLine(action), maxAction), note)
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

// truncate makes s a condition message: one line, and bounded.
func truncate(s string) string { return text.Clip(text.OneLine(s), maxMessage) }
