package vettool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/go/analysis"

	"github.com/kfsm/kfsm/fsmvet"
)

func TestArgumentsAreGoVets(t *testing.T) {
	for args, want := range map[string]bool{
		"-V=full":                           true,
		"-flags":                            true,
		"/tmp/go-build1/b001/vet.cfg":       true,
		"-kfsm.warnings=false /tmp/vet.cfg": true,
		"":                                  false,
		"vet ./...":                         false,
		"cover a.cfg":                       false,
		"-test.run=TestX":                   false,
	} {
		if got := Is(strings.Fields(args)); got != want {
			t.Errorf("Is(%q) = %v, want %v", args, got, want)
		}
	}
}

// go vet asks the tool for the facts of every dependency; kfsm's analyzer
// has none, so the tool writes that there are none without reading the
// package, and still analyses a package that go vet asks it to check. An
// analyzer that has facts, or requires one that has, gets them read.
func TestNoFactsWrittenWithoutReadingTheDependency(t *testing.T) {
	dir := t.TempDir()
	config := func(vetxOnly bool) (cfg, vetx string) {
		cfg, vetx = filepath.Join(dir, fmt.Sprintf("vet-%v.cfg", vetxOnly)), filepath.Join(dir, fmt.Sprintf("vet-%v.out", vetxOnly))
		data := fmt.Sprintf(`{"ID":"example.com/dep","GoFiles":["missing.go"],"VetxOnly":%v,"VetxOutput":%q}`, vetxOnly, vetx)
		if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return cfg, vetx
	}

	cfg, vetx := config(true)
	if !factsOnly(cfg, fsmvet.Analyzer) {
		t.Fatal("the tool reads a dependency that go vet asks only for its facts")
	}
	if data, err := os.ReadFile(vetx); err != nil || len(data) != 0 {
		t.Errorf("the facts written are %q (%v), want an empty file", data, err)
	}

	cfg, vetx = config(false)
	if factsOnly(cfg, fsmvet.Analyzer) {
		t.Error("the tool skips a package that go vet asks it to check")
	}
	if _, err := os.Stat(vetx); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the tool wrote facts for a package it did not read: %v", err)
	}

	type fact struct{ analysis.Fact }
	withFacts := &analysis.Analyzer{Name: "facts", FactTypes: []analysis.Fact{new(fact)}}
	cfg, _ = config(true)
	if factsOnly(cfg, &analysis.Analyzer{Name: "requires", Requires: []*analysis.Analyzer{withFacts}}) {
		t.Error("the tool skips the facts of an analyzer that requires one with facts")
	}
}
