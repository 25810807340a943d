// Package proctest builds the programs that tests run as separate OS
// processes, and runs them (on Linux, where the kernel kills them should
// the test binary die).
package proctest

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Build compiles the main package pkg (such as "./internal/operator",
// relative to the test's directory) into a temporary directory and
// returns the program's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test builds and runs an operator process")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command builds %s: %v", pkg, err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	start := time.Now()
	if out, err := exec.Command(goCmd, "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	t.Logf("built %s in %v", pkg, time.Since(start).Round(time.Millisecond))
	return bin
}
