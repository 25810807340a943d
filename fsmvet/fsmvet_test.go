package fsmvet_test

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/kfsm/kfsm/fsmvet"
)

func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), fsmvet.Analyzer, "basic", "closures", "shared", "helpers", "pipeline", "escape", "dynamic", "flags", "deletion", "versions", "migrated", "kept", "unreleased")
}

// A machine kept from an earlier release in a test file fails no run for
// what the current code asks of it: its refusals are warnings, in the
// test file. The test's own code, and a test's machine that is no earlier
// version, are checked as any.
func TestAKeptVersionOnlyWarns(t *testing.T) {
	for _, r := range analysistest.Run(t, analysistest.TestData(), fsmvet.Analyzer, "kept") {
		for _, d := range r.Diagnostics {
			at := r.Pass.Fset.Position(d.Pos)
			kept := strings.HasPrefix(d.Message, "machine server as kept")
			if kept != fsmvet.IsWarning(d.Category) {
				t.Errorf("%s:%d: %s: category %s, a warning: %t, want %t", filepath.Base(at.Filename), at.Line, d.Message, d.Category, !kept, kept)
			}
			if kept && !strings.HasSuffix(at.Filename, "_test.go") {
				t.Errorf("%s:%d: %s: the kept machine's finding is outside its test file", filepath.Base(at.Filename), at.Line, d.Message)
			}
		}
	}
}
