package fsm

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
)

const (
	// Condition messages are bounded; errors can be long.
	maxMessage = 1024
	// The events API refuses longer notes, actions and reasons.
	maxNote   = 1024
	maxAction = 128
	maxReason = 128
)

// event records an event about regarding, within the events API's limits.
func (r *reconciler[T]) event(regarding T, related runtime.Object, eventtype, reason, action, note string) {
	reason, action, note = eventText(reason, action, note)
	r.recorder.Eventf(regarding, related, eventtype, reason, action, note)
}

// eventText is an event's reason, action and note as the recorder takes
// them: one line each, within the events API's limits (the note is cut
// as a whole), and the note as a format, whose % are its own.
func eventText(reason, action, note string) (string, string, string) {
	note = clip(oneLine(note), maxNote)
	if strings.Contains(note, "%") {
		note = strings.ReplaceAll(note, "%", "%%")
	}
	return clip(oneLine(reason), maxReason), clip(oneLine(action), maxAction), note
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
func truncate(s string) string { return clip(oneLine(s), maxMessage) }

// oneLine is s with each control character (C0, newlines and tabs
// included, DEL and C1) made a space: what kfsm writes to conditions and
// events is one line, with no escape sequence for a terminal that prints
// it to obey.
func oneLine(s string) string {
	if !strings.ContainsFunc(s, func(c rune) bool { return c < ' ' || c > '~' }) {
		return s // printable ASCII, the usual case, without a call of the mapping per character
	}
	return strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, s)
}

// clip shortens s to at most n bytes, cut at a character and marked with
// an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
