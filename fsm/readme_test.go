package fsm_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README's tutorial is the code that the tests compile and run under a
// manager: tutorial, in example_test.go.
func TestReadmeTutorialIsTheTestedCode(t *testing.T) {
	body := sourceOf(t, "example_test.go", `(?s)\nfunc tutorial\(\) \*fsm\.Machine\[\*Door\] \{\n(.*?)\n\treturn m\n\}`)
	var code strings.Builder
	for _, line := range strings.Split(body, "\n") {
		code.WriteString(strings.TrimPrefix(line, "\t") + "\n")
	}
	readmeHas(t, "the tutorial", code.String())
}

// The README's tests of the door are those that run here.
func TestReadmeTestsAreTheTestedCode(t *testing.T) {
	readmeHas(t, "the door's tests", sourceOf(t, "door_test.go", `(?s)\n(func TestDoor\(.*\n\})\n`)+"\n")
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

// readmeHas fails unless README.md holds code as a Go block.
func readmeHas(t *testing.T, what, code string) {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+code+"```") {
		t.Errorf("README.md's %s is not the tested code; it should read:\n```go\n%s```", what, code)
	}
}
