// Package proctest builds the programs that tests run as separate OS
// processes, and runs them (on Linux, where the kernel kills them should
// the test binary die).
package proctest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Build compiles the main package pkg (such as "./internal/operator",
// relative to the test's directory) and returns the program's path. The
// program is the one that go run keeps in the Go build cache: a package
// whose code did not change is linked once, not once per test and run
// (linking kfsm's command takes 20 CPU-seconds), and its contents, which
// go vet keys a vet tool's findings by, stay the same.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test builds and runs a program")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds %s: %v", pkg, err)
	}
	start := time.Now()
	// go run hands the program's path to the -exec command. It runs a
	// program it built for the first time from a temporary directory,
	// which is gone once it returns, and keeps it in the cache for the
	// second time.
	var bin string
	for range 2 {
		out, err := exec.Command(goCmd, "run", "-exec", "echo", pkg).Output()
		if err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, stderr(err))
		}
		bin = strings.TrimSpace(string(out))
		if _, err := os.Stat(bin); err == nil {
			break
		}
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("building %s: the go command kept no program: %v", pkg, err)
	}
	t.Logf("built %s in %v", pkg, time.Since(start).Round(time.Millisecond))
	return bin
}

// stderr is what a command that failed wrote to its standard error.
func stderr(err error) []byte {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.Stderr
	}
	return nil
}
