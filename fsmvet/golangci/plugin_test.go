package golangci_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/kfsm/kfsm/fsmvet"
	_ "github.com/kfsm/kfsm/fsmvet/golangci"
)

// golangci-lint finds the plugin by its name and runs the analyzers that it
// builds from the settings of .golangci.yml.
func TestThePluginRunsTheAnalyzer(t *testing.T) {
	testdata, err := filepath.Abs(filepath.Join("..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		reason   string
		settings any
		warnings bool
	}{
		"NoSettings":    {reason: "the analyzer reports everything by default", settings: nil, warnings: true},
		"WarningsOn":    {reason: "warnings: true is the default", settings: map[string]any{"warnings": true}, warnings: true},
		"WarningsOff":   {reason: "warnings: false leaves the errors only", settings: map[string]any{"warnings": false}, warnings: false},
		"EmptySettings": {reason: "an empty settings block is the default", settings: map[string]any{}, warnings: true},
	} {
		t.Run(name, func(t *testing.T) {
			newPlugin, err := register.GetPlugin("kfsm")
			if err != nil {
				t.Fatal(err)
			}
			p, err := newPlugin(tc.settings)
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if p.GetLoadMode() != register.LoadModeTypesInfo {
				t.Errorf("load mode %q, want %q: the analyzer reads types", p.GetLoadMode(), register.LoadModeTypesInfo)
			}
			analyzers, err := p.BuildAnalyzers()
			if err != nil || len(analyzers) != 1 {
				t.Fatalf("BuildAnalyzers: %d analyzers, %v", len(analyzers), err)
			}
			// The basic package's expectations include warnings; without
			// them, analysistest reports each as missing, which the
			// recorder counts.
			rec := &recorder{}
			var errors, warnings int
			for _, r := range analysistest.Run(rec, testdata, analyzers[0], "basic") {
				for _, d := range r.Diagnostics {
					if fsmvet.IsWarning(d.Category) {
						warnings++
					} else {
						errors++
					}
				}
			}
			if errors == 0 {
				t.Errorf("%s: no errors reported", tc.reason)
			}
			if got := warnings > 0; got != tc.warnings {
				t.Errorf("%s: %d warnings reported", tc.reason, warnings)
			}
			if tc.warnings && len(rec.errors) > 0 {
				t.Errorf("%s: the analysis differs from the expectations:\n%v", tc.reason, rec.errors)
			}
		})
	}
}

func TestUnknownSettingsAreRefused(t *testing.T) {
	newPlugin, err := register.GetPlugin("kfsm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newPlugin(map[string]any{"warning": false}); err == nil {
		t.Error("a misspelt setting was accepted")
	}
}

type recorder struct{ errors []string }

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
