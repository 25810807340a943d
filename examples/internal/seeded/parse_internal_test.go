package seeded

import (
	"strings"
	"testing"
)

const diff = `diff --git a/examples/moose/moose.go b/examples/moose/moose.go
--- a/examples/moose/moose.go
+++ b/examples/moose/moose.go
@@ -1 +1 @@
-a
+b
`

func TestParse(t *testing.T) {
	b, err := parse("x", []byte("A counter in memory.\n\nFaults: misses\n\n"+diff))
	if err != nil {
		t.Fatal(err)
	}
	if b.What != "A counter in memory." || b.FaultsCatches || b.Example != "examples/moose" || len(b.Files) != 1 {
		t.Errorf("parsed %+v", b)
	}
	for _, c := range []struct{ patch, want string }{
		{"A bug.\n", "no diff"},
		{"A bug.\n\n" + diff, `no line "Faults: catches"`},
		{"Faults: catches\n" + diff, "no lines on what is wrong"},
		{"A bug.\nFaults: catches\n" + strings.ReplaceAll(diff, "moose.go", "moose_test.go"), "not a handler file"},
		{"A bug.\nFaults: catches\n" + strings.ReplaceAll(diff, "examples/moose/", "fsm/"), "not a handler file"},
		{"A bug.\nFaults: catches\n" + diff + strings.ReplaceAll(diff, "moose", "database"), "both examples/moose and examples/database"},
	} {
		if _, err := parse("x", []byte(c.patch)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parse(%q) = %v, want an error with %q", c.patch, err, c.want)
		}
	}
}
