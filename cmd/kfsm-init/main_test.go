package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The runs below stop at a problem that Init finds before it writes, so
// that they need neither the Go module proxy nor minutes of go commands:
// what they show is which flags and directory the command passed on.

func TestRunTakesTheDirectoryBeforeOrAfterTheFlags(t *testing.T) {
	checkout, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// A directory that is not empty is refused by name.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--module", "example.com/widget", "--kind", "widget", "--group", "example.com", "--kfsm-path", checkout}
	for name, args := range map[string][]string{
		"DirectoryFirst": append([]string{dir}, flags...),
		"DirectoryLast":  append(append([]string{}, flags...), dir),
		"SingleDash":     {"-module=example.com/widget", "-kind=widget", dir, "-group=example.com", "-kfsm-path=" + checkout},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			err := run(t.Context(), args, &stdout, &stderr)
			if err == nil {
				t.Fatal("run succeeded with a kind that is not a Go identifier")
			}
			for _, want := range []string{`kind "widget" is not a Go identifier`, "directory " + dir + " is not empty"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			for _, unwanted := range []string{"module", "group", "kfsm path"} {
				if strings.Contains(err.Error(), unwanted) {
					t.Errorf("error speaks of the %s, which the flags set right:\n%v", unwanted, err)
				}
			}
			if stdout.Len() > 0 {
				t.Errorf("a refused project printed %q", stdout.String())
			}
		})
	}
}

func TestRunRefusesTwoDirectories(t *testing.T) {
	err := run(t.Context(), []string{"one", "two", "--kind", "Widget"}, new(strings.Builder), new(strings.Builder))
	if err == nil || !strings.Contains(err.Error(), "one directory at most, not one two") {
		t.Fatalf("run() error = %v, want one that names both directories", err)
	}
}

func TestRunReportsBadFlagsWithTheUsage(t *testing.T) {
	var stderr strings.Builder
	if err := run(t.Context(), []string{"--kindd", "Widget"}, new(strings.Builder), &stderr); !errors.Is(err, errFlags) {
		t.Fatalf("run() error = %v, want errFlags", err)
	}
	for _, want := range []string{"flag provided but not defined: -kindd", "Usage:\n  kfsm-init [DIR]", "-kfsm-path"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("standard error lacks %q:\n%s", want, stderr.String())
		}
	}
}

func TestRunHelpIsNotAnError(t *testing.T) {
	var stderr strings.Builder
	if err := run(t.Context(), []string{"-h"}, new(strings.Builder), &stderr); err != nil {
		t.Fatalf("run(-h) error = %v", err)
	}
	if !strings.Contains(stderr.String(), "Init writes a new operator project") {
		t.Errorf("help lacks kfsm init's description:\n%s", stderr.String())
	}
}

// The point of the command: go run compiles only the standard library
// and a few small packages of kfsm's own, never a Kubernetes library.
func TestTheCommandImportsNothingButTheStandardLibraryAndKFSM(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list listed no packages; the check reads the wrong output")
	}
	for _, dep := range deps {
		if !strings.HasPrefix(dep, "github.com/kfsm/kfsm/") {
			t.Errorf("kfsm-init imports %s", dep)
		}
	}
}
