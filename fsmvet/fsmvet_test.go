package fsmvet_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/kfsm/kfsm/fsmvet"
)

func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), fsmvet.Analyzer, "basic", "closures", "shared", "helpers", "pipeline", "escape", "dynamic", "flags", "deletion", "versions", "migrated", "unreleased")
}
