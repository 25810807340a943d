package userdeps

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// heavy are the modules that the library must not bring: the command's
// (cobra, chromedp), the examples' (gRPC), the sink's (CloudEvents) and
// the OpenTelemetry SDK, which is the operator author's choice.
var heavy = []string{
	"google.golang.org/grpc",
	"github.com/cloudevents/",
	"go.opentelemetry.io/otel/sdk",
	"github.com/spf13/cobra",
	"github.com/chromedp/",
}

func TestALibraryUserGetsNoHeavyDependencies(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/operator\n\ngo 1.26.0\n\n" +
			"require github.com/kfsm/kfsm v0.0.0-00010101000000-000000000000\n\n" +
			"replace github.com/kfsm/kfsm => " + root + "\n",
		"main.go": `package main

import (
	_ "github.com/kfsm/kfsm/cluster"
	_ "github.com/kfsm/kfsm/fsm"
	_ "github.com/kfsm/kfsm/fsmtest"
	_ "github.com/kfsm/kfsm/graph"
	_ "github.com/kfsm/kfsm/storage"
)

func main() {}
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gocmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	gocmd("mod", "tidy")

	// The module graph: kfsm's go.mod requires none of them. (Some are in
	// any controller-runtime user's graph anyway, at the versions that
	// controller-runtime's own go.mod requires: kfsm adds no module and
	// raises no version.)
	graph := gocmd("mod", "graph")
	if !strings.Contains(graph, "github.com/kfsm/kfsm@v0.0.0-00010101000000-000000000000 sigs.k8s.io/controller-runtime@") {
		t.Fatalf("go mod graph has no edge from kfsm to controller-runtime, which the library needs; the check reads the wrong graph:\n%s", graph)
	}
	for _, edge := range strings.Split(graph, "\n") {
		from, to, _ := strings.Cut(edge, " ")
		if strings.HasPrefix(from, "github.com/kfsm/kfsm@") && isHeavy(to) {
			t.Errorf("kfsm's go.mod requires %s", to)
		}
	}
	// The modules only kfsm's other modules use are not in the graph at all.
	for _, line := range strings.Split(gocmd("list", "-m", "all"), "\n") {
		if strings.HasPrefix(line, "github.com/cloudevents/") || strings.HasPrefix(line, "github.com/chromedp/") {
			t.Errorf("a module that imports only the library has %s in its module graph", line)
		}
	}
	// The build: no package of them is compiled into the user's program.
	packages := gocmd("list", "-deps", ".")
	if !strings.Contains(packages, "sigs.k8s.io/controller-runtime/pkg/manager\n") {
		t.Fatalf("the program's packages do not include controller-runtime's manager; the check reads the wrong list:\n%s", packages)
	}
	for _, pkg := range strings.Split(packages, "\n") {
		if isHeavy(pkg) {
			t.Errorf("a program that imports only the library compiles %s", pkg)
		}
	}
}

func isHeavy(path string) bool {
	for _, h := range heavy {
		if strings.HasPrefix(path, h) {
			return true
		}
	}
	return false
}
