package fsmvet_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The analyzer lives in the library's module, but a program that imports
// the library's packages compiles none of golang.org/x/tools.
func TestTheLibraryDoesNotCompileTheAnalyzer(t *testing.T) {
	library := []string{"fsm", "graph", "cluster", "fsmtest"}
	args := []string{"list", "-deps"}
	for _, p := range library {
		args = append(args, "github.com/kfsm/kfsm/"+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Split(string(out), "\n")
	if len(deps) < 100 {
		t.Fatalf("go list -deps lists %d packages; the check reads the wrong list:\n%s", len(deps), out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "golang.org/x/tools/") || strings.HasPrefix(p, "github.com/kfsm/kfsm/fsmvet") {
			t.Errorf("a program that imports %s compiles %s", strings.Join(library, ", "), p)
		}
	}
}
