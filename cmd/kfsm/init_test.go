package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/fsm"
)

// kfsm init runs the scaffold's Init with the scaffold's flags, as
// kfsm-init does; these runs stop at problems found before anything is
// written.
func TestInitTakesTheScaffoldsFlags(t *testing.T) {
	checkout, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), io.Discard, "init", dir, "--module", "example.com/widget", "--kind", "widget", "--group", "example.com", "--version", "2", "--kfsm-path", checkout)
	if err == nil {
		t.Fatal("kfsm init succeeded with a kind that is not a Go identifier")
	}
	for _, want := range []string{`kind "widget" is not a Go identifier`, `version "2" is not a Kubernetes API version`, "directory " + dir + " is not empty"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	for _, unwanted := range []string{"module", "group", "kfsm path"} {
		if strings.Contains(err.Error(), unwanted) {
			t.Errorf("error speaks of the %s, which the flags set right:\n%v", unwanted, err)
		}
	}
}

func TestInitRequiresModuleKindAndGroup(t *testing.T) {
	err := run(t.Context(), io.Discard, "init", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `required flag(s) "group", "kind", "module" not set`) {
		t.Fatalf("kfsm init without flags: error = %v, want the required flags named", err)
	}
}

var initArgs = []string{"--module", "example.com/widget", "--kind", "Widget", "--group", "example.com"}

// A kfsm command built from a checkout, as this test is, knows no release
// for a project to require: init asks for one, or for a checkout, and
// writes nothing.
func TestInitRefusesWithoutARelease(t *testing.T) {
	if v := fsm.Version(); v != "(devel)" {
		t.Fatalf("the test binary's kfsm is %q, want (devel): it is built in the workspace", v)
	}
	for name, tc := range map[string]struct {
		reason string
		args   []string
		want   []string
	}{
		"DevelopmentBuild": {
			reason: "Without a flag, the project would require the command's own kfsm, which is no release.",
			want:   []string{"kfsm (devel) is not a release", "--kfsm-version", "--kfsm-path"},
		},
		"NotARelease": {
			reason: "--kfsm-version names a release.",
			args:   []string{"--kfsm-version", "0.1"},
			want:   []string{"kfsm 0.1 is not a release"},
		},
		"VersionAndPath": {
			reason: "A project uses a release or a checkout, not both.",
			args:   []string{"--kfsm-version", "v0.1.0", "--kfsm-path", "."},
			want:   []string{"kfsm-path", "kfsm-version"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "widget")
			err := run(t.Context(), io.Discard, append(append([]string{"init", dir}, initArgs...), tc.args...)...)
			if err == nil {
				t.Fatalf("%s\ninit succeeded", tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s\nerror %q does not say %q", tc.reason, err, w)
				}
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s\ninit made %s: %v", tc.reason, dir, err)
			}
		})
	}
}

// --kfsm-version is the release that the project requires, without a
// replace directive. (Completing the project then needs the module proxy,
// which this test turns off.)
func TestInitRequiresTheReleaseItIsGiven(t *testing.T) {
	t.Setenv("GOPROXY", "off")
	dir := filepath.Join(t.TempDir(), "widget")
	err := run(t.Context(), io.Discard, append([]string{"init", dir, "--kfsm-version", "v0.3.0"}, initArgs...)...)
	if err == nil || !strings.Contains(err.Error(), "go mod tidy") {
		t.Fatalf("init = %v, want go mod tidy to fail without a module proxy", err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "require github.com/kfsm/kfsm v0.3.0\n") || strings.Contains(string(mod), "replace") {
		t.Errorf("go.mod does not require kfsm v0.3.0 alone:\n%s", mod)
	}
}
