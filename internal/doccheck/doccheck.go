// Package doccheck keeps the documents of kfsm's examples true: a test
// fails when a diagram in a README no longer matches the code.
package doccheck

import (
	"os"
	"strings"
	"testing"
)

// ReadmeHasDiagram fails unless README.md in the test's directory holds
// diagram as a Mermaid block, so that a committed diagram stays current.
func ReadmeHasDiagram(t testing.TB, diagram string) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```mermaid\n"+diagram+"```") {
		t.Errorf("README.md does not have the current diagram; it is:\n```mermaid\n%s```", diagram)
	}
}
