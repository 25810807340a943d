package logvalues

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapLogger returns a logger that writes zap's JSON lines, with their
// callers, to out.
func zapLogger(out *bytes.Buffer) logr.Logger {
	enc := zap.NewProductionEncoderConfig()
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(out), zapcore.DebugLevel)
	return zapr.NewLogger(zap.New(core, zap.AddCaller()))
}

func lines(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var all []map[string]any
	for line := range strings.Lines(out.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		all = append(all, m)
	}
	return all
}

func TestLinesCarryTheValues(t *testing.T) {
	var out bytes.Buffer
	base := zapLogger(&out).WithValues("controller", "gadget")
	log := With(base, "machine", "m", "state", "Configured")
	log.Info("applied", "child", "cm")
	log.Error(errors.New("refused"), "apply failed")
	log.WithValues("try", 2).WithName("sub").V(0).Info("again")
	got := lines(t, &out)
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(got), out.String())
	}
	for i, line := range got {
		for key, want := range map[string]any{"controller": "gadget", "machine": "m", "state": "Configured"} {
			if line[key] != want {
				t.Errorf("line %d: %s = %v, want %v:\n%v", i, key, line[key], want, line)
			}
		}
		// The caller is this test, not the package's sink.
		if caller, _ := line["caller"].(string); !strings.HasPrefix(caller, "logvalues/logvalues_test.go") {
			t.Errorf("line %d: caller %q, want this test", i, caller)
		}
	}
	if got[0]["child"] != "cm" || got[1]["error"] != "refused" || got[2]["try"] != float64(2) || got[2]["logger"] != "sub" {
		t.Errorf("the lines lost their own values:\n%s", out.String())
	}
}

func TestLevelsStayTheLoggers(t *testing.T) {
	var out bytes.Buffer
	enc := zap.NewProductionEncoderConfig()
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(&out), zapcore.InfoLevel)
	log := With(zapr.NewLogger(zap.New(core)), "state", "S")
	if log.V(1).Enabled() {
		t.Fatal("V(1) is enabled under an info-level logger")
	}
	log.V(1).Info("hidden")
	log.Info("shown")
	if got := lines(t, &out); len(got) != 1 || got[0]["msg"] != "shown" {
		t.Fatalf("want the info line alone:\n%s", out.String())
	}
}

func TestDiscardStaysDiscard(t *testing.T) {
	log := With(logr.Discard(), "state", "S")
	if log.Enabled() {
		t.Fatal("a discarding logger became enabled")
	}
	log.Info("nowhere") // must not panic
}
