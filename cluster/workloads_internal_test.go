package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestComponentThatExitsIsNamedWithItsOutput(t *testing.T) {
	dir := t.TempDir()
	comp, err := startComponent("kube-scheduler", "/bin/sh", dir, "-c",
		"echo 'failed to listen on 127.0.0.1:10259: bind: address already in use' >&2; exit 1")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{dir: dir, components: []*component{comp}}
	err = c.waitFor(t.Context(), "something that never happens", func(context.Context) (bool, error) { return false, nil })
	var exited *exitError
	if !errors.As(err, &exited) {
		t.Fatalf("waitFor() error = %v, want an *exitError", err)
	}
	if exited.name != "kube-scheduler" || !strings.Contains(exited.log, "address already in use") {
		t.Errorf("error = %q, want it to name kube-scheduler and say why", err)
	}
}

func TestComponentThatCannotStartIsNamed(t *testing.T) {
	_, err := startComponent("kwok", "/nonexistent/kwok", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "starting kwok") {
		t.Fatalf("startComponent() error = %v, want one naming kwok", err)
	}
}

func TestStopEndsARunningComponent(t *testing.T) {
	comp, err := startComponent("kwok", "/bin/sleep", t.TempDir(), "600")
	if err != nil {
		t.Fatal(err)
	}
	if err := comp.stop(); err != nil {
		t.Fatal(err)
	}
	if comp.exitErr() == nil {
		t.Error("the component still runs after stop")
	}
}
