package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The demo's lines name objects, states and errors that come from the
// cluster and from whoever posts to its CloudEvents receiver: each is one
// line, its control characters escaped.
func TestDemoPrintsOneLineOfNoControlCharacter(t *testing.T) {
	var out bytes.Buffer
	p := &transitionPrinter{out: &out}
	p.Info(0, "transition", "machine", "moose", "object", "herd/moose-01", "from", "Roaming", "to", "Lost"+hostile, "reason", "Timeout"+hostile)
	p.Error(errors.New("state Roaming failed: "+hostile), "Reconciler error")
	p.print("cloudevent " + hostile)
	assertPrintable(t, "the demo", out.String())
	if n := strings.Count(out.String(), "\n"); n != 3 || strings.Count(out.String(), "pwned") != 4 {
		t.Errorf("the demo printed %d lines, want 3, and hides what it escaped:\n%s", n, &out)
	}
}
