package fsmtest

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/fsmtest/internal/explore"
)

// The replay command of a failed run, pasted into a shell, runs that test
// alone under that schedule, whatever characters the test's name holds.
func TestTheReplayCommandRunsTheTestAloneWhateverItsName(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh to parse the command: %v", err)
	}
	const schedule = "burst,fail:databases/orders:4"
	for _, name := range []string{
		"TestDatabaseSurvivesFaults",
		"TestMachines/O'Brien's_gadget",
		"TestMachines/a.b+c(1)|[x]$",
		`TestMachines/"quoted"_$HOME_\n_*`,
	} {
		command := replayCommand(name, schedule)
		rest, ok := strings.CutPrefix(command, "go test ")
		if !ok {
			t.Fatalf("%s: the replay command %q is not a go test", name, command)
		}
		// The shell's words, one a line: printf repeats its format.
		out, err := exec.Command(sh, "-c", `printf '%s\n' `+rest).Output()
		if err != nil {
			t.Fatalf("%s: sh cannot parse %q: %v", name, command, err)
		}
		args := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(args) != 4 || args[0] != "-run" || args[2] != "." || args[3] != "-kfsm.explore="+schedule {
			t.Fatalf("%s: sh reads %q as the words %q", name, command, args)
		}
		// go test splits -run at each slash and matches each level alone.
		levels, patterns := strings.Split(name, "/"), strings.Split(args[1], "/")
		if len(levels) != len(patterns) {
			t.Fatalf("%s: -run %q has %d levels", name, args[1], len(patterns))
		}
		for i, p := range patterns {
			re, err := regexp.Compile(p)
			if err != nil {
				t.Fatalf("%s: -run %q: %v", name, args[1], err)
			}
			if !re.MatchString(levels[i]) || re.MatchString(levels[i]+"x") || re.MatchString("x"+levels[i]) {
				t.Errorf("%s: -run %q does not match %q alone", name, args[1], levels[i])
			}
		}
	}
}

// A failed run that passed when run again alone needed the load of the
// runs beside it: its report gives, besides the replay, the command that
// runs the search again under that load.
func TestAFailureThatPassedAloneNamesTheCommandThatLoadsItAgain(t *testing.T) {
	x := &explorer{t: t, o: faultOptions{depth: 2, parallel: 24}, clean: &outcome{}}
	out := &outcome{Outcome: explore.Outcome{Schedule: explore.Schedule{{Kind: explore.Lag}}}}
	if report := x.describe(out, false); strings.Contains(report, "under the same load") {
		t.Errorf("a failure that replays alone names a command to load it:\n%s", report)
	}
	report := x.describe(out, true)
	_, command, ok := strings.Cut(report, "\nunder the same load: ")
	if !ok {
		t.Fatalf("the report names no command to run the search under the same load:\n%s", report)
	}
	want := "go test -run " + shellQuote(runPattern(t.Name())) + " . -kfsm.depth=2 -kfsm.parallel=24"
	if command != want {
		t.Errorf("the command to run the search under the same load is\n%s\nwant\n%s", command, want)
	}
}
