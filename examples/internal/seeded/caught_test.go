//go:build seeded

package seeded_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kfsm/kfsm/examples/internal/seeded"
)

// Each seeded bug in its example, under the example's main scenario:
// fsmtest.Explore, two faults at a time, stopping at its first failure,
// catches it with a counterexample of at most two faults, while the clean
// run passes; the counterexample's replay command fails again, within
// three tries; and fsmtest.Faults, one fault at a time, catches it or
// misses it as the patch says. Faults is Explore at depth 1 with the
// classes of AllFaults, and Explore runs every schedule of depth 1 before
// any of depth 2: a counterexample of one fault of those classes is one
// that Faults runs, and one of two faults says that every run of depth 1
// passed; Faults runs on its own only after a counterexample of one fault
// that Explore alone strikes. The checks of several bugs share the
// machine at once, as go test's -parallel says (make seeded-bugs: eight).
func TestExploreCatchesEverySeededBug(t *testing.T) {
	bugs, err := seeded.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bugs {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel() // several at a time: a check's runs mostly wait
			overlay, err := b.Overlay(root(t), t.TempDir(), map[string]string{
				filepath.Join(b.Example, "seeded_faults_test.go"): faultsTest(t, b),
			})
			if err != nil {
				t.Fatal(err)
			}
			// One build of the example's tests with the bug, run for
			// Explore, its replays and, if need be, Faults: a go test of
			// each would build it again. Without DWARF, as make test
			// builds its tests: nothing here reads it, and leaving it out
			// makes the link a fifth cheaper.
			bin := filepath.Join(t.TempDir(), "example.test")
			start := time.Now()
			if out, err := goIn(t, overlay, "test", "-race", "-ldflags=-w", "-c", "-o", bin, pkg(b)); err != nil {
				t.Fatalf("building the example's tests with the bug: %v\n%s", err, out)
			}
			t.Logf("go test -c: %v", time.Since(start).Round(time.Second))
			test := func(args ...string) (string, error) {
				start := time.Now()
				defer func() { t.Logf("%s %s: %v", pkg(b), strings.Join(args, " "), time.Since(start).Round(time.Second)) }()
				return runIn(t, b, bin, append([]string{"-test.timeout=20m"}, args...)...)
			}

			schedule := caught(t, test)
			if schedule == "" {
				return
			}

			faults := !strings.Contains(schedule, ",") && ofFaults.MatchString(schedule)
			if !faults && !strings.Contains(schedule, ",") {
				// One fault of a kind that Explore alone strikes, which
				// cut the other runs of depth 1: Faults runs on its own.
				out, err := test("-test.run=^TestSeededUnderFaults$", "-test.failfast")
				faults = err != nil
				if faults && !failedRun.MatchString(out) {
					t.Fatalf("Faults failed without a failed run:\n%s", tail(out))
				}
			}
			if faults != b.FaultsCatches {
				t.Errorf("Faults %s the bug (Explore's counterexample: %s); the patch says it %s", verdict(faults), schedule, verdict(b.FaultsCatches))
			}
			t.Logf("Faults: %s it", verdict(faults))
		})
	}
}

var (
	// ofFaults matches one fault of a kind that a class of
	// fsmtest.AllFaults strikes.
	ofFaults = regexp.MustCompile(`^((crash|fail|conflict):[^:,]+:\d+|(action-start|action-end|call-fail|call-lost|call-timeout):\d+|drift:.*|lag|burst)$`)
)

// faultsTest is a test file for b's example that runs its main scenario
// under Faults, with underFaults from the example's own tests.
func faultsTest(t *testing.T, b seeded.Bug) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root(t), b.Example, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	clause := regexp.MustCompile(`(?m)^package (\w+)$`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := clause.FindSubmatch(data); m != nil && strings.Contains(string(data), "\nfunc underFaults(") {
			return fmt.Sprintf(`package %s

import (
	"testing"

	"github.com/kfsm/kfsm/fsmtest"
)

func TestSeededUnderFaults(t *testing.T) {
	machine, scenario, opts := underFaults(t)
	fsmtest.Faults(t, machine, scenario, opts...)
}
`, m[1])
		}
	}
	t.Fatalf("no test file of %s defines underFaults, the machine and scenario of its fault tests", b.Example)
	return ""
}

func verdict(catches bool) string {
	if catches {
		return "catches"
	}
	return "misses"
}

// runIn runs the test binary bin of b's example with args, in the
// example's directory, as go test runs it.
func runIn(t *testing.T, b seeded.Bug, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join(root(t), b.Example)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
