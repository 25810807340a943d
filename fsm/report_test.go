package fsm_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// Events keep within the API's limits: an error of 5,000 characters is
// still recorded, its note cut to 1,024.
func TestUnderManagerALongErrorKeepsItsWarning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("long-error", fsm.Lifecycle).
		Initial("Work").
		State("Work", func(context.Context, *request) fsm.Result {
			return fsm.Fail(errors.New("the backend said: " + strings.Repeat("no ", 1700)))
		}, fsm.To("Finished"), fsm.Retries(1)).
		State("Finished", done, fsm.Final())
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the failure's event", func() bool { return occurrences(e.apiEvents(), fsm.ReasonHandlerFailed) == 1 })
	for _, ev := range e.apiEvents() {
		t.Logf("%s %s: %d bytes", ev.Type, ev.Reason, len(ev.Note))
		if ev.Reason == fsm.ReasonHandlerFailed && (len(ev.Note) > 1024 || !strings.HasSuffix(ev.Note, "…") || ev.Type != corev1.EventTypeWarning) {
			t.Errorf("the failure's event is %s with a note of %d bytes ending %q; want a Warning of at most 1024 bytes, cut with …", ev.Type, len(ev.Note), ev.Note[len(ev.Note)-10:])
		}
	}
}

// Redact keeps secrets out of everything kfsm writes: conditions, events,
// log lines (controller-runtime's included) and the returned error.
func TestUnderManagerRedactFiltersErrorsEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	password := regexp.MustCompile(`password=\S+`)
	m := fsm.New[*gadget]("redacted", fsm.Lifecycle).
		Tune(fsm.Tuning{Redact: func(s string) string { return password.ReplaceAllString(s, "password=***") }}).
		Initial("Connect").
		State("Connect", func(context.Context, *request) fsm.Result {
			return fsm.Fail(errors.New("cannot connect to postgres://app:password=hunter2@db:5432"))
		}, fsm.To("Connected"), fsm.Retries(2)).
		State("Connected", done, fsm.Final())
	l := run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to stall", func() bool { return e.stalled("g") })
	time.Sleep(time.Second)
	var texts []string
	for _, c := range e.get("g").Status.Conditions {
		texts = append(texts, c.Message)
	}
	for _, ev := range e.apiEvents() {
		texts = append(texts, ev.Note)
	}
	for _, line := range l.logs.all() {
		texts = append(texts, line.String())
	}
	var redacted bool
	for _, text := range texts {
		if strings.Contains(text, "hunter2") {
			t.Errorf("the secret leaked: %s", text)
		}
		redacted = redacted || strings.Contains(text, "password=***")
	}
	if !redacted {
		t.Error("the redacted error appears nowhere")
	}
}

// hostile is text that a terminal would obey: it sets the window title,
// clears the screen, writes the clipboard (OSC 52), forges a line, and
// starts a CSI as the C1 character.
const hostile = "\x1b]0;pwned\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \r\nForged: line \u009b31m \x7f"

// What kfsm writes from a handler's error, a panic, a Stop, an action's
// error or a handler's event reaches conditions and events with no
// control character, so that kubectl describe, which lets most of them
// through, prints it safely on one line; the words are still there.
func TestUnderManagerConditionsAndEventsHoldNoControlCharacter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("control", fsm.Lifecycle).
		Initial("Work").
		State("Work", func(_ context.Context, r *request) fsm.Result {
			r.Event(corev1.EventTypeNormal, "Odd"+hostile, "noted "+hostile)
			switch r.Object.Spec.Mode {
			case "fail":
				return fsm.Fail(errors.New("failed " + hostile))
			case "panic":
				panic("panicked " + hostile)
			case "stop":
				return fsm.Stop("Gave"+hostile, "stopped "+hostile)
			}
			a := r.Action("backup", func(context.Context, *fsm.ActionRun) error { return errors.New("backup failed " + hostile) })
			if a.State == fsm.ActionFailed {
				return fsm.Fail(a.Err)
			}
			return fsm.Wait(0, "BackingUp")
		}, fsm.To("Finished"), fsm.Retries(1)).
		State("Finished", done, fsm.Final())
	run(e, m)
	names := []string{"fail", "panic", "stop", "action"}
	for _, name := range names {
		e.gadget(name, v1alpha1.GadgetSpec{Mode: name})
	}
	listEvents := func() []eventsv1.Event {
		var list eventsv1.EventList
		if err := e.direct.List(t.Context(), &list, client.InNamespace(e.namespace)); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	e.fe.Await("every gadget to stall, with an event", func() bool {
		stalled := 0
		for _, ev := range listEvents() {
			if strings.HasPrefix(ev.Note, "stalled in state Work") {
				stalled++
			}
		}
		return stalled == len(names) && !slices.ContainsFunc(names, func(n string) bool { return !e.stalled(n) })
	})

	controls := func(s string) bool { return strings.ContainsFunc(s, unicode.IsControl) }
	for _, name := range names {
		for _, c := range e.get(name).Status.Conditions {
			if controls(c.Message) || controls(c.Reason) {
				t.Errorf("%s: condition %s holds a control character: %q: %q", name, c.Type, c.Reason, c.Message)
			}
		}
		if msg := condition(e.get(name), fsm.ConditionStalled).Message; !strings.Contains(msg, "pwned") || !strings.Contains(msg, "Forged: line") {
			t.Errorf("%s: the Stalled message %q lost the text", name, msg)
		}
	}
	noted := false
	for _, ev := range listEvents() {
		if controls(ev.Note) || controls(ev.Reason) || controls(ev.Action) {
			t.Errorf("event %s holds a control character: %q, %q: %q", ev.Name, ev.Reason, ev.Action, ev.Note)
		}
		noted = noted || strings.HasPrefix(ev.Note, "noted ") && strings.Contains(ev.Note, "pwned")
	}
	if !noted {
		t.Error("no event keeps the handler's note")
	}
}
