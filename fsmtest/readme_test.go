package fsmtest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/internal/coverage"
	"github.com/kfsm/kfsm/internal/doccheck"
)

// An operator written from the documents alone, in a module of its own
// that requires kfsm, needs no harness beyond its scenarios: its machine is
// the README's tutorial, its tests are the tutorial's and docs/testing.md's
// test under faults, and they pass. The author's type is the test API's
// Door, as controller-gen generates it.
func TestReadmeOperatorInAModuleOfItsOwn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a module of its own")
	}
	t.Parallel() // another process does the work
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	find := func(doc, prefix string) string {
		t.Helper()
		for _, b := range doccheck.Blocks(t, filepath.Join(root, doc), "go") {
			if strings.HasPrefix(b, prefix) {
				return b
			}
		}
		t.Fatalf("%s has no Go block starting with %q", doc, prefix)
		return ""
	}
	tutorial := find("README.md", "m := fsm.New[*Door]")
	testMain := find("README.md", "func TestMain(")
	tests := find("README.md", "func TestDoor(") + "\n" + find(filepath.Join("docs", "testing.md"), "func TestDoorSurvivesFaults(")

	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/door\n\ngo 1.26\n\nrequire github.com/kfsm/kfsm v0.0.0\n\nreplace github.com/kfsm/kfsm => " + root + "\n",
		"go.sum": read(t, filepath.Join(root, "go.sum")),
		"door.go": `package door

import (
	"context"
	"time"

	"github.com/kfsm/kfsm/fsm"

	"example.com/door/api"
)

type Door = api.Door

func tutorial() *fsm.Machine[*Door] {
` + indent(tutorial) + `	return m
}
`,
		"door_test.go": `package door

import (
	"io/fs"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"

	"example.com/door/api"
)

` + testMain + "\n" + tests,
		"api/crd.go": "package api\n\nimport \"embed\"\n\n//go:embed crd/*.yaml\nvar CRDs embed.FS\n",
	}
	for _, name := range []string{"door_types.go", "gadget_types.go", "widget_types.go", "zz_generated.deepcopy.go"} {
		source := read(t, filepath.Join(root, "internal", "testapi", "v1alpha1", name))
		files["api/"+name] = strings.Replace(source, "package v1alpha1", "package api", 1)
	}
	crds, err := filepath.Glob(filepath.Join(root, "internal", "testapi", "crd", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs: %v", err)
	}
	for _, crd := range crds {
		files["api/crd/"+filepath.Base(crd)] = read(t, crd)
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	profile := filepath.Join(dir, "door.cover")
	cmd := exec.CommandContext(t.Context(), "go", "test", "-count=1", ".", "-args", "-kfsm.coverprofile="+profile)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -trimpath") // -trimpath: the build cache serves the module in a new directory
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the documents' operator fails its tests: %v\n%s", err, out)
	}
	f, err := os.Open(profile)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	p, err := coverage.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if taken, total := p.Covered("door"); taken != 4 || total != 4 {
		t.Errorf("the documents' tests cover %d of the door's %d edges, want 4 of 4:\n%s", taken, total, p.Summary())
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func indent(code string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(code, "\n") {
		if strings.TrimSpace(line) != "" {
			b.WriteString("\t")
		}
		b.WriteString(line)
	}
	return b.String()
}
