package dashboard

import (
	"time"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
)

// clipAt is about as much of an action's progress, result or error as
// its row shows; the whole, up to 1024 bytes, is in the row's tooltip.
const clipAt = 160

// actionRow is one of an object's actions, as its panel shows it.
type actionRow struct {
	Name, Key string
	// Status is the word the row shows; Class is the same for the style,
	// from a fixed set whatever the outcome says.
	Status, Class    string
	Age, Heartbeat   string
	Progress, Ending clipped
	Indeterminate    bool
}

// clipped is a text cut for its row, and the whole of it.
type clipped struct {
	Text, Whole string
}

func clip(s string) clipped {
	if r := []rune(s); len(r) > clipAt {
		return clipped{Text: string(r[:clipAt-1]) + "…", Whole: s}
	}
	return clipped{Text: s, Whole: s}
}

// actionRows are the object's actions in the order the status keeps them.
func actionRows(o inspect.Object, now time.Time) []actionRow {
	var rows []actionRow
	for _, rec := range o.Status.Actions {
		row := actionRow{Name: rec.Name, Key: rec.Key, Age: shortDuration(now.Sub(rec.Started.Time)), Progress: clip(rec.Progress)}
		switch {
		case rec.Outcome == fsm.ActionSucceeded.String():
			row.Status, row.Class, row.Ending = rec.Outcome, "succeeded", clip(prefixed("result: ", rec.Result))
		case rec.Outcome != "" || rec.Error != "": // ended, or failed and waiting for its retry
			row.Status, row.Class, row.Ending = fsm.ActionFailed.String(), "failed", clip(prefixed("error: ", rec.Error))
		case o.Indeterminate(rec):
			row.Status, row.Class, row.Indeterminate = fsm.ActionIndeterminate.String(), "indeterminate", true
		default:
			row.Status, row.Class = "Running", "running"
		}
		if rec.Heartbeat != nil {
			row.Heartbeat = shortDuration(now.Sub(rec.Heartbeat.Time))
		}
		rows = append(rows, row)
	}
	return rows
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}
