package seeded_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/examples/internal/seeded"
)

// root is the repository's root, from this package's directory.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// goIn runs go with args in the examples module, with the bug in place.
func goIn(t *testing.T, overlay string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{args[0], "-overlay", overlay}, args[1:]...)...)
	cmd.Dir = filepath.Join(root(t), "examples")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pkg is the bug's example as a package path of the examples module.
func pkg(b seeded.Bug) string { return "./" + strings.TrimPrefix(b.Example, "examples/") }

func TestTenBugsAcrossTheExamplesSomeThatFaultsMisses(t *testing.T) {
	bugs, err := seeded.Load()
	if err != nil {
		t.Fatal(err)
	}
	examples, missed := map[string]bool{}, 0
	for _, b := range bugs {
		examples[b.Example] = true
		if !b.FaultsCatches {
			missed++
		}
	}
	if len(bugs) < 10 || len(examples) < 3 || missed == 0 {
		t.Errorf("%d bugs in %d examples, %d of them missed by Faults: want at least 10 in 3, and some that Faults misses", len(bugs), len(examples), missed)
	}
}

// Every patch still applies to its example and builds: a change of an
// example that a patch no longer fits fails here, in make test, rather
// than in make seeded-bugs.
func TestEveryPatchAppliesAndBuilds(t *testing.T) {
	bugs, err := seeded.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bugs {
		t.Run(b.Name, func(t *testing.T) {
			overlay, err := b.Overlay(root(t), t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := goIn(t, overlay, "build", pkg(b)); err != nil {
				t.Errorf("the example with the bug does not build: %v\n%s", err, out)
			}
		})
	}
}
