package fsm

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// jsonLogger returns a logger that keeps its lines, as JSON with their
// callers, in lines, up to verbosity.
func jsonLogger(lines *[]map[string]any, verbosity int) logr.Logger {
	return funcr.NewJSON(func(obj string) {
		var m map[string]any
		if err := json.Unmarshal([]byte(obj), &m); err != nil {
			m = map[string]any{"unreadable": obj}
		}
		*lines = append(*lines, m)
	}, funcr.Options{LogCaller: funcr.All, Verbosity: verbosity})
}

func TestLinesCarryTheValues(t *testing.T) {
	var got []map[string]any
	base := jsonLogger(&got, 0).WithValues("controller", "gadget")
	log := withValues(base, "machine", "m", "state", "Configured")
	log.Info("applied", "child", "cm")
	log.Error(errors.New("refused"), "apply failed")
	log.WithValues("try", 2).WithName("sub").V(0).Info("again")
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3: %v", len(got), got)
	}
	for i, line := range got {
		for key, want := range map[string]any{"controller": "gadget", "machine": "m", "state": "Configured"} {
			if line[key] != want {
				t.Errorf("line %d: %s = %v, want %v: %v", i, key, line[key], want, line)
			}
		}
		// The caller is this test, not the sink that adds the values.
		caller, _ := line["caller"].(map[string]any)
		if caller["file"] != "logvalues_internal_test.go" {
			t.Errorf("line %d: caller %v, want this test", i, line["caller"])
		}
	}
	if got[0]["child"] != "cm" || got[1]["error"] != "refused" || got[2]["try"] != float64(2) || got[2]["logger"] != "sub" {
		t.Errorf("the lines lost their own values: %v", got)
	}
}

func TestLevelsStayTheLoggers(t *testing.T) {
	var got []map[string]any
	log := withValues(jsonLogger(&got, 0), "state", "S")
	if log.V(1).Enabled() {
		t.Fatal("V(1) is enabled under an info-level logger")
	}
	log.V(1).Info("hidden")
	log.Info("shown")
	if len(got) != 1 || got[0]["msg"] != "shown" {
		t.Fatalf("want the info line alone: %v", got)
	}
}

func TestDiscardStaysDiscard(t *testing.T) {
	log := withValues(logr.Discard(), "state", "S")
	if log.Enabled() {
		t.Fatal("a discarding logger became enabled")
	}
	log.Info("nowhere") // must not panic
}
