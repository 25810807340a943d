package seeded_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// caught has Explore search for a counterexample of the bug, through
// test (a run of the example's test binary with these arguments), and
// replays it; it returns the counterexample, or "" having failed t.
//
// A bug that shows under some timings only (the moose's herd kept in
// memory) may pass one replay: the replay gets three tries, and stops at
// the first that fails. A counterexample that needed the timing of a
// loaded machine may pass all three on a quieter one: Explore then
// searches once more, and its counterexample must replay.
func caught(t testing.TB, test func(args ...string) (string, error)) string {
	t.Helper()
	for search := 1; ; search++ {
		out, err := test("-test.run=Survives?Faults$", "-test.failfast", "-kfsm.depth=2")
		schedule := counterexample(t, out, err)
		if schedule == "" {
			return ""
		}
		t.Logf("Explore: %s", schedule)
		if n := len(strings.Split(schedule, ",")); n > 2 {
			t.Errorf("the counterexample %s has %d faults after shrinking, want at most 2", schedule, n)
		}
		out, err = test("-test.run=Survives?Faults$", "-kfsm.explore="+schedule, "-test.count=3", "-test.failfast")
		switch {
		case err == nil && search == 1:
			t.Logf("the replay of %s passed three times: searching again", schedule)
			continue
		case err == nil:
			t.Errorf("the replay of %s passed three times with the bug:\n%s", schedule, tail(out))
		case counterexample(t, out, err) != schedule:
			t.Errorf("the replay of %s did not fail as its search did:\n%s", schedule, tail(out))
		}
		return schedule
	}
}

var (
	failedRun = regexp.MustCompile(`fsmtest: a run with (\d+) fault\(s\) failed:`)
	replay    = regexp.MustCompile(`replay: go test .* -kfsm\.explore='([^']*)'`)
)

// counterexample returns the schedule of the run that Explore reports
// failed, and fails t unless go test failed with such a report for a run
// with faults: a clean run that fails is no bug of faults.
func counterexample(t testing.TB, out string, err error) string {
	t.Helper()
	m, r := failedRun.FindStringSubmatch(out), replay.FindStringSubmatch(out)
	switch {
	case err == nil:
		t.Errorf("Explore passes with the bug:\n%s", tail(out))
	case m == nil || r == nil:
		t.Errorf("go test failed without a counterexample from Explore: %v\n%s", err, tail(out))
	case m[1] == "0" || r[1] == "":
		t.Errorf("the clean run fails with the bug: the scenario catches it without faults\n%s", tail(out))
	default:
		return r[1]
	}
	return ""
}

// tail is the end of a long output.
func tail(out string) string {
	if len(out) > 6000 {
		return "…" + out[len(out)-6000:]
	}
	return out
}

// recorder is a testing.TB that keeps what fails it.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// A counterexample whose replay passes on a quieter machine is searched
// for once more, and the second's replay decides; a second replay that
// passes fails the check, as does a first search that finds nothing.
func TestACounterexampleThatDoesNotReplayIsSearchedAgain(t *testing.T) {
	failed := func(schedule string) (string, error) {
		return fmt.Sprintf("fsmtest: a run with %d fault(s) failed:\n  replay: go test -run '^TestX$' . -kfsm.explore='%s'\nFAIL", strings.Count(schedule, ",")+1, schedule), errors.New("exit status 1")
	}
	passed := func(string) (string, error) { return "PASS", nil }
	for _, tc := range []struct {
		name  string
		runs  []func(string) (string, error) // search, replay, search, replay
		want  string
		fails string
	}{
		{"the first replays", []func(string) (string, error){failed, failed}, "burst,fail:databases/orders:4", ""},
		{"the second replays", []func(string) (string, error){failed, passed, failed, failed}, "burst,fail:databases/orders:4", ""},
		{"neither replays", []func(string) (string, error){failed, passed, failed, passed}, "burst,fail:databases/orders:4", "passed three times with the bug"},
		{"nothing found", []func(string) (string, error){passed}, "", "Explore passes with the bug"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			runs := 0
			got := caught(r, func(args ...string) (string, error) {
				if runs == len(tc.runs) {
					t.Fatalf("run %d: %v, after the last expected", runs+1, args)
				}
				runs++
				return tc.runs[runs-1]("burst,fail:databases/orders:4")
			})
			if got != tc.want || runs != len(tc.runs) {
				t.Errorf("caught = %q after %d runs, want %q after %d", got, runs, tc.want, len(tc.runs))
			}
			switch {
			case tc.fails == "" && len(r.errors) > 0:
				t.Errorf("failed: %q", r.errors)
			case tc.fails != "" && (len(r.errors) != 1 || !strings.Contains(r.errors[0], tc.fails)):
				t.Errorf("failed with %q, want one error naming %q", r.errors, tc.fails)
			}
		})
	}
}
