// Package golangci makes kfsm's analyzer a module plugin of golangci-lint
// v2, named kfsm. Build a golangci-lint that has it with golangci-lint
// custom and a .custom-gcl.yml that imports this package; the setup is in
// the documentation of package fsmvet.
//
// Its one setting, warnings (true by default), turns off the warnings
// when false: states that nothing moves to and exits that no handler
// takes.
package golangci

import (
	"github.com/golangci/plugin-module-register/register"
	"golang.org/x/tools/go/analysis"

	"github.com/kfsm/kfsm/fsmvet"
)

func init() {
	register.Plugin("kfsm", New)
}

// Settings are the plugin's settings in .golangci.yml.
type Settings struct {
	// Warnings, when false, leaves out the warnings.
	Warnings *bool `json:"warnings"`
}

// New makes the plugin from its settings; golangci-lint calls it.
func New(settings any) (register.LinterPlugin, error) {
	s, err := register.DecodeSettings[Settings](settings)
	if err != nil {
		return nil, err
	}
	return plugin{warnings: s.Warnings == nil || *s.Warnings}, nil
}

type plugin struct{ warnings bool }

// BuildAnalyzers returns kfsm's analyzer, without its warnings when the
// settings say so.
func (p plugin) BuildAnalyzers() ([]*analysis.Analyzer, error) {
	if p.warnings {
		return []*analysis.Analyzer{fsmvet.Analyzer}, nil
	}
	errorsOnly := *fsmvet.Analyzer
	errorsOnly.Run = func(pass *analysis.Pass) (any, error) {
		report := pass.Report
		pass.Report = func(d analysis.Diagnostic) {
			if !fsmvet.IsWarning(d.Category) {
				report(d)
			}
		}
		return fsmvet.Analyzer.Run(pass)
	}
	return []*analysis.Analyzer{&errorsOnly}, nil
}

// GetLoadMode says that the analyzer needs type information.
func (plugin) GetLoadMode() string { return register.LoadModeTypesInfo }
