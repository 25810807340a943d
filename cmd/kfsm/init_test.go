package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
