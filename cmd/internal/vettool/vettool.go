// Package vettool is kfsm's analyzer as go vet's tool: go vet runs the
// program given to -vettool with the arguments of its own protocol, once
// for every package that it vets and every package that those import.
package vettool

import (
	"encoding/json"
	"os"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/kfsm/kfsm/fsmvet"
)

// Main answers go vet's request in args (the program's arguments) with
// fsmvet's analyzer and exits.
func Main(args []string) {
	if len(args) > 0 && factsOnly(args[len(args)-1], fsmvet.Analyzer) {
		os.Exit(0)
	}
	unitchecker.Main(fsmvet.Analyzer) // exits
}

// Is reports whether args are go vet's: -V=full or -flags to learn about
// the tool, or flags and a single *.cfg file to analyse a package.
func Is(args []string) bool {
	if len(args) == 1 && (args[0] == "-V=full" || args[0] == "-flags") {
		return true
	}
	if len(args) == 0 || !strings.HasSuffix(args[len(args)-1], ".cfg") {
		return false
	}
	for _, a := range args[:len(args)-1] {
		if !strings.HasPrefix(a, "-") {
			return false
		}
	}
	return true
}

// factsOnly reports whether cfgFile, go vet's configuration of one
// package, asks only for the facts that the analysis of the packages
// that import it reads, while a has none, and then writes that there are
// none. go vet asks so of every dependency, and unitchecker parses and
// type-checks each before it finds that a exports nothing: all of
// client-go and the API types, minutes of CPU each time the tool changes.
func factsOnly(cfgFile string, a *analysis.Analyzer) bool {
	data, err := os.ReadFile(cfgFile)
	if err != nil {
		return false // unitchecker says what is wrong
	}
	var cfg struct {
		VetxOnly   bool
		VetxOutput string
	}
	if json.Unmarshal(data, &cfg) != nil || !cfg.VetxOnly || cfg.VetxOutput == "" || usesFacts(a) {
		return false
	}
	return os.WriteFile(cfg.VetxOutput, nil, 0o666) == nil
}

// usesFacts reports whether a, or an analyzer it requires, has facts.
func usesFacts(a *analysis.Analyzer) bool {
	return len(a.FactTypes) > 0 || slices.ContainsFunc(a.Requires, usesFacts)
}
