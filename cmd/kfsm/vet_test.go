package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/internal/proctest"
)

// copyFlags are the go command's flags for a copy of the examples in a
// module of its own: -trimpath, as make test's, lets the build cache
// serve its packages in their new directory instead of compiling them
// again on every run.
const copyFlags = "-mod=mod -trimpath"

func TestVetFindsNothingInTheExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test type-checks every example")
	}
	var out bytes.Buffer
	if err := run(t.Context(), &out, "vet", "../../examples/..."); err != nil {
		t.Fatalf("kfsm vet on the examples: %v\n%s", err, &out)
	}
	if out.Len() > 0 {
		t.Errorf("kfsm vet reports on the examples:\n%s", &out)
	}
}

// With an exit taken out of the auto-updater's graph, kfsm vet, and go vet
// with kfsm as its vet tool, report the one handler line whose Next has
// become illegal, and fail.
func TestVetReportsTheNextThatAnExitRemovalMadeIllegal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds kfsm and vets a copy of the examples")
	}
	bin := proctest.Build(t, ".")
	// kfsm-vet is the same program until the analyzer's code changes (go
	// run's, without the repository's revision in it), and go vet, which
	// keys what it found by the tool's contents, serves every dependency's
	// facts from its cache; kfsm changes with the engine, and go vet asks
	// it again about each of the thousand packages the examples import.
	vetTool := proctest.Build(t, "../kfsm-vet")
	dir, line := brokenAutoupdate(t)
	want := fmt.Sprintf("autoupdate.go:%d:11: state Updating asks to move to Failed, which is not among its exits [Processed, Condemned]; "+
		"kfsm refuses the transition at run time: to allow it, declare fsm.To(Processed, Condemned, Failed) at autoupdate.go:75", line)
	command := func(name string, args ...string) (stdout, stderr string, code int) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+copyFlags)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("%s: %v", name, err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}

	t.Run("KfsmVet", func(t *testing.T) {
		stdout, stderr, code := command(bin, "vet", "./...")
		if code == 0 {
			t.Errorf("kfsm vet exited with 0; stderr:\n%s", stderr)
		}
		if got := strings.TrimSuffix(stdout, "\n"); got != filepath.Join("autoupdate", want) {
			t.Errorf("kfsm vet printed\n%s\nwant exactly\n%s\nstderr:\n%s", got, filepath.Join("autoupdate", want), stderr)
		}
	})
	t.Run("GoVet", func(t *testing.T) {
		_, stderr, code := command("go", "vet", "-vettool="+vetTool, "./...")
		if code == 0 {
			t.Errorf("go vet exited with 0; stderr:\n%s", stderr)
		}
		var reports []string
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, " asks to move to ") || strings.Contains(l, " raises events ") {
				reports = append(reports, l)
			}
		}
		if len(reports) != 1 || !strings.HasSuffix(reports[0], want) {
			t.Errorf("go vet reported\n%s\nwant one line ending in\n%s", stderr, want)
		}
	})
	// kfsm answers go vet as kfsm-vet does: what go vet asks of a tool
	// before it runs it.
	t.Run("KfsmAsGoVetsTool", func(t *testing.T) {
		if out, _, code := command(bin, "-V=full"); code != 0 || !strings.Contains(out, " version devel ") {
			t.Errorf("kfsm -V=full printed %q and exited with %d, want its version for go vet", out, code)
		}
		if out, _, code := command(bin, "-flags"); code != 0 || !strings.Contains(out, `"kfsm.warnings"`) {
			t.Errorf("kfsm -flags printed %q and exited with %d, want the analyzer's flags", out, code)
		}
	})
}

// With the moose example's state Sleeping renamed and no migration, kfsm
// vet fails, naming the released state whose objects would stop and the
// migration to declare; with the migration declared, it is clean.
func TestVetRefusesAGraphThatStrandsAReleasedState(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test vets a copy of the examples")
	}
	dir, root := examplesModule(t)
	moose := filepath.Join(dir, "moose")
	if err := os.CopyFS(moose, os.DirFS(filepath.Join(root, "examples", "moose"))); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", copyFlags)
	edit(t, filepath.Join(moose, "moose.go"), `Sleeping fsm.State = "Sleeping"`, `Sleeping fsm.State = "Resting"`)

	var out bytes.Buffer
	err := run(t.Context(), &out, "vet", "./moose")
	if err == nil {
		t.Fatalf("kfsm vet passed a graph that strands the objects of Sleeping:\n%s", &out)
	}
	want := `moose/moose.go:76:9: machine moose strands the objects of state Sleeping of version 1: no migration says where they go; ` +
		`declare one, such as Machine.Version(2, fsm.Rename("Sleeping", ...)), or with fsm.Remove, fsm.Merge or fsm.Split; ` +
		`or, if no release has shipped version 1, mark the lock "unreleased": true, and its graph may change freely until it is released ` +
		`(the graphs released are in moose.graph.lock.json)`
	if got := strings.TrimSpace(out.String()); got != want {
		t.Errorf("kfsm vet printed\n%s\nwant exactly\n%s", got, want)
	}

	edit(t, filepath.Join(moose, "moose.go"), `fsm.Lifecycle).`, `fsm.Lifecycle).Version(2, fsm.Rename("Sleeping", Sleeping)).`)
	out.Reset()
	if err := run(t.Context(), &out, "vet", "./moose"); err != nil || out.Len() > 0 {
		t.Errorf("kfsm vet with the migration declared: %v\n%s", err, &out)
	}
}

// edit replaces the one occurrence of old in file with new.
func edit(t *testing.T, file, old, new string) {
	t.Helper()
	code, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(code, []byte(old)); n != 1 {
		t.Fatalf("%s has %q %d times, not once; the test needs a new edit", file, old, n)
	}
	if err := os.WriteFile(file, bytes.Replace(code, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

// brokenAutoupdate copies the auto-updater example into a module of its
// own, with Failed taken out of the exits of Updating, and returns its
// directory and the line of the handler's Next(Failed), now illegal.
func brokenAutoupdate(t *testing.T) (string, int) {
	t.Helper()
	dir, root := examplesModule(t)
	if err := os.CopyFS(filepath.Join(dir, "autoupdate"), os.DirFS(filepath.Join(root, "examples", "autoupdate"))); err != nil {
		t.Fatal(err)
	}

	source := filepath.Join(dir, "autoupdate", "autoupdate.go")
	code, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	const declared = "fsm.To(Processed, Condemned, Failed), fsm.Timeout("
	if bytes.Count(code, []byte(declared)) != 1 {
		t.Fatalf("autoupdate.go does not declare %q once; the test needs a new edit", declared)
	}
	code = bytes.Replace(code, []byte(declared), []byte("fsm.To(Processed, Condemned), fsm.Timeout("), 1)
	if err := os.WriteFile(source, code, 0o644); err != nil {
		t.Fatal(err)
	}
	line := 0
	for i, l := range strings.Split(string(code), "\n") {
		if strings.TrimSpace(l) == "return fsm.Next(Failed)" {
			if line != 0 {
				t.Fatal("autoupdate.go returns Next(Failed) more than once; the test needs a new edit")
			}
			line = i + 1
		}
	}
	if line == 0 {
		t.Fatal("autoupdate.go no longer returns Next(Failed); the test needs a new edit")
	}
	return dir, line
}

// examplesModule makes a module of its own with the examples' go.mod and
// go.sum, and returns its directory and the repository's.
func examplesModule(t *testing.T) (dir, root string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	goMod, err := os.ReadFile(filepath.Join(root, "examples", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// The kfsm modules it requires are this checkout's, as in the workspace.
	goMod = fmt.Appendf(goMod, "\nreplace github.com/kfsm/kfsm => %s\n\nreplace github.com/kfsm/kfsm/cesink => %s\n", root, filepath.Join(root, "cesink"))
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), goMod, 0o644); err != nil {
		t.Fatal(err)
	}
	goSum, err := os.ReadFile(filepath.Join(root, "examples", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), goSum, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, root
}

// The state names that vet reports come from the code it reads: they
// reach the terminal with their control characters escaped.
func TestVetPrintsNoControlCharacter(t *testing.T) {
	dir, _ := examplesModule(t)
	code := fmt.Sprintf(`package evil

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/fsm"
)

type Gadget struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Status fsm.Status
}

func (g *Gadget) FSMStatus() *fsm.Status        { return &g.Status }
func (g *Gadget) DeepCopyObject() runtime.Object { c := *g; return &c }

const (
	Roaming fsm.State = "Roaming" + %[1]s
	Lost    fsm.State = "Lost" + %[1]s
)

func Machine() *fsm.Machine[*Gadget] {
	return fsm.New[*Gadget]("evil", fsm.Lifecycle).Initial(Roaming).
		State(Roaming, roam, fsm.To(Lost)).
		State(Lost, nil, fsm.Final())
}

func roam(context.Context, *fsm.Request[*Gadget]) fsm.Result { return fsm.Next("Gone" + %[1]s) }
`, strconv.Quote(hostile))
	if err := os.Mkdir(filepath.Join(dir, "evil"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "evil", "evil.go"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", copyFlags)
	var out bytes.Buffer
	err := vet(&out, []string{"./..."}, true, false)
	if err == nil || !strings.Contains(out.String(), "asks to move to Gone") {
		t.Fatalf("kfsm vet = %v, want it to report the Next to Gone:\n%s", err, &out)
	}
	assertPrintable(t, "kfsm vet", out.String())
	if !strings.Contains(out.String(), "pwned") || !strings.Contains(out.String(), "Forged: line") {
		t.Errorf("kfsm vet does not show the text it escaped:\n%s", &out)
	}
}
