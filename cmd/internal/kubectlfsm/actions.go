package kubectlfsm

import (
	"slices"
	"strings"
	"time"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/fsm"
)

// clipAt is about as much of an action's progress, result or error as a
// row shows: the whole is up to 1024 bytes, and the status has it.
const clipAt = 60

// actionStatus is a record's word: Succeeded or Failed once it ended
// (Failed too while a failed run waits for its retry under the same
// key), Indeterminate when kfsm stalled the object on it, Running
// otherwise. A
// Running record whose heartbeat is old may be a lost run that kfsm has
// not looked at yet; the heartbeat's age lets the reader judge.
func actionStatus(o inspect.Object, rec fsm.ActionRecord) string {
	switch {
	case rec.Outcome != "":
		return rec.Outcome
	case rec.Error != "":
		return fsm.ActionFailed.String()
	case o.Indeterminate(rec):
		return fsm.ActionIndeterminate.String()
	}
	return "Running"
}

// running are the records that no outcome or stall accounts for.
func running(o inspect.Object) []fsm.ActionRecord {
	var out []fsm.ActionRecord
	for _, rec := range o.Status.Actions {
		if rec.Outcome == "" && rec.Error == "" && !o.Indeterminate(rec) {
			out = append(out, rec)
		}
	}
	return out
}

// clip is s made one line and cut to about clipAt characters. It escapes
// first, so that a cut never leaves half a character for the terminal.
func clip(s string) string {
	s = terminal.Line(s)
	if r := []rune(s); len(r) > clipAt {
		return string(r[:clipAt-1]) + "…"
	}
	return s
}

// ago is how long before now t was.
func ago(t, now time.Time) string { return shortDuration(now.Sub(t)) + " ago" }

// heartbeat is the age of a record's last sign of life, or "" without one.
func heartbeat(rec fsm.ActionRecord, now time.Time) string {
	if rec.Heartbeat == nil {
		return ""
	}
	return "heartbeat " + ago(rec.Heartbeat.Time, now)
}

// ending is what a record's end says: its result or its error.
func ending(rec fsm.ActionRecord) string {
	if rec.Error != "" {
		return "error: " + clip(rec.Error)
	}
	return prefixed("result: ", clip(rec.Result))
}

// actionRows are describe's rows of the object's actions.
func actionRows(o inspect.Object, now time.Time) [][]string {
	rows := [][]string{}
	for _, rec := range o.Status.Actions {
		rows = append(rows, []string{
			"  " + rec.Name, actionStatus(o, rec), "key " + rec.Key, "started " + ago(rec.Started.Time, now),
			heartbeat(rec, now), strings.Join(nonEmpty(prefixed("progress: ", clip(rec.Progress)), ending(rec)), "; "),
		})
	}
	return rows
}

func nonEmpty(ss ...string) []string {
	return slices.DeleteFunc(ss, func(s string) bool { return s == "" })
}

// life is, in a sentence, when a record's run started, when it last
// showed life and where it was.
func life(rec fsm.ActionRecord, now time.Time) string {
	s := "started " + ago(rec.Started.Time, now)
	if rec.Heartbeat != nil {
		s += ", last heartbeat " + ago(rec.Heartbeat.Time, now)
	} else {
		s += ", no heartbeat"
	}
	return s + prefixed(", last checkpoint: ", clip(rec.Progress))
}
