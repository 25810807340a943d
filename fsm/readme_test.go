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
	source, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)\nfunc tutorial\(\) \*fsm\.Machine\[\*Door\] \{\n(.*?)\n\treturn m\n\}`).FindSubmatch(source)
	if body == nil {
		t.Fatal("no func tutorial in example_test.go")
	}
	var code strings.Builder
	for _, line := range strings.Split(string(body[1]), "\n") {
		code.WriteString(strings.TrimPrefix(line, "\t") + "\n")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+code.String()+"```") {
		t.Errorf("README.md's tutorial is not the code of tutorial(); it should read:\n```go\n%s```", code.String())
	}
}
