package fsm_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/internal/doccheck"
)

// The README's tutorial is the code that the tests compile and run under a
// manager: tutorial, in example_test.go.
func TestReadmeTutorialIsTheTestedCode(t *testing.T) {
	body := sourceOf(t, "example_test.go", `(?s)\nfunc tutorial\(\) \*fsm\.Machine\[\*Door\] \{\n(.*?)\n\treturn m\n\}`)
	var code strings.Builder
	for _, line := range strings.Split(body, "\n") {
		code.WriteString(strings.TrimPrefix(line, "\t") + "\n")
	}
	doccheck.HasBlock(t, "../README.md", "go", code.String())
}

// The door's tests that the documents show are those that run here: the
// README's tutorial tests the door, and docs/testing.md tests it under
// faults and under changes of its spec.
func TestReadmeTestsAreTheTestedCode(t *testing.T) {
	for _, shown := range []struct{ doc, test string }{
		{"../README.md", "TestDoor"},
		{"../docs/testing.md", "TestDoorSurvivesFaults"},
		{"../docs/testing.md", "TestDoorUnderSpecChanges"},
	} {
		code := sourceOf(t, "door_test.go", `(?s)\n(func `+shown.test+`\(t \*testing\.T\) \{\n.*?\n\})\n`)
		doccheck.HasBlock(t, shown.doc, "go", code+"\n")
	}
}

// sourceOf returns the first group of pattern in file.
func sourceOf(t *testing.T, file, pattern string) string {
	t.Helper()
	source, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(pattern).FindSubmatch(source)
	if m == nil {
		t.Fatalf("%s has no %s", file, pattern)
	}
	return string(m[1])
}
