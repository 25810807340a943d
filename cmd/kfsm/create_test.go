package main

import (
	"io"
	"strings"
	"testing"
)

// kfsm create api takes the scaffold's flags and works in the current
// directory, which must hold a project that kfsm init wrote: this
// package's does not.
func TestCreateAPIWorksInTheProjectOfTheCurrentDirectory(t *testing.T) {
	err := run(t.Context(), io.Discard, "create", "api", "--kind", "Gadget", "--version", "v1")
	if err == nil || !strings.Contains(err.Error(), "no PROJECT here") {
		t.Fatalf("kfsm create api outside a project: error = %v, want one that says there is no PROJECT", err)
	}
}

func TestCreateAPIRequiresTheKind(t *testing.T) {
	err := run(t.Context(), io.Discard, "create", "api")
	if err == nil || !strings.Contains(err.Error(), `required flag(s) "kind" not set`) {
		t.Fatalf("kfsm create api without --kind: error = %v, want the required flag named", err)
	}
}
