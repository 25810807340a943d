// Package doccheck keeps kfsm's documents true: a test fails when a code
// block that a document shows is no longer the code that the tests run, or
// when a diagram in a README no longer matches the machine it draws.
package doccheck

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Read returns the text of the document at path, relative to the test's
// directory.
func Read(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Blocks returns the contents of the document's fenced code blocks in
// language lang, in order, each with its last newline.
func Blocks(t testing.TB, path, lang string) []string {
	t.Helper()
	var blocks []string
	for _, m := range fenced(lang).FindAllStringSubmatch(Read(t, path), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// HasBlock fails unless the document at path holds code, which ends with
// a newline, as a fenced block in language lang.
func HasBlock(t testing.TB, path, lang, code string) {
	t.Helper()
	if !strings.Contains(Read(t, path), "```"+lang+"\n"+code+"```") {
		t.Errorf("%s does not show the current code; its block should read:\n```%s\n%s```", path, lang, code)
	}
}

// ReadmeHasDiagram fails unless README.md in the test's directory holds
// diagram as a Mermaid block, so that a committed diagram stays current.
func ReadmeHasDiagram(t testing.TB, diagram string) {
	t.Helper()
	HasBlock(t, "README.md", "mermaid", diagram)
}

func fenced(lang string) *regexp.Regexp {
	return regexp.MustCompile("(?s)```" + regexp.QuoteMeta(lang) + "\n(.*?)```")
}
