package fsm_test

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var updateAPI = flag.Bool("update-api", false, "rewrite testdata/api.txt, the golden of the exported API")

// The exported API of package fsm is the one in testdata/api.txt: every
// exported name with its signature and its doc, as go doc prints them. A
// change to the API is made on purpose, with the golden; moving code
// between the package's files, or into its internal packages, never
// changes it. The package doc is prose, and left out.
func TestTheExportedAPIIsTheGoldenOne(t *testing.T) {
	out, err := exec.Command("go", "doc", "-all", ".").Output()
	if err != nil {
		t.Fatalf("go doc -all: %v", err)
	}
	got := exportedAPI(string(out))
	if got == "" {
		t.Fatalf("go doc -all printed no exported declarations:\n%s", out)
	}
	golden := filepath.Join("testdata", "api.txt")
	if *updateAPI {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("the exported API differs from %s (-golden +now); a change meant so is made with -update-api:\n%s", golden, diff)
	}
}

var (
	section = regexp.MustCompile(`(?m)^(CONSTANTS|VARIABLES|FUNCTIONS|TYPES)$`)
	// A declaration starts a line; its doc and the rest of a group are
	// indented, or close it.
	declaration = regexp.MustCompile(`(?m)^(const|var|func|type) `)
)

// exportedAPI is go doc -all's text from its first section (CONSTANTS,
// VARIABLES, FUNCTIONS or TYPES) on, after the package doc, in an order
// that does not depend on the files: go doc lists the constants and
// variables of a section, and of a type, in the order of the files that
// declare them. Each section's declarations are sorted, and in TYPES each
// type keeps its own, sorted, after it.
func exportedAPI(doc string) string {
	heads := section.FindAllStringIndex(doc, -1)
	var b strings.Builder
	for i, h := range heads {
		end := len(doc)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		name := doc[h[0]:h[1]]
		decls := split(doc[h[1]:end])
		if name == "TYPES" {
			decls = byType(decls)
		} else {
			slices.Sort(decls)
		}
		b.WriteString(name + "\n\n" + strings.Join(decls, ""))
	}
	return b.String()
}

// split cuts text at each declaration, each piece ending with a newline.
func split(text string) []string {
	starts := declaration.FindAllStringIndex(text, -1)
	var out []string
	for i, s := range starts {
		end := len(text)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		out = append(out, strings.TrimRight(text[s[0]:end], "\n")+"\n\n")
	}
	return out
}

// byType sorts the declarations that follow each type declaration, and
// the types.
func byType(decls []string) []string {
	var groups [][]string
	for _, d := range decls {
		if strings.HasPrefix(d, "type ") || len(groups) == 0 {
			groups = append(groups, []string{d})
			continue
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], d)
	}
	var out []string
	slices.SortFunc(groups, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	for _, g := range groups {
		slices.Sort(g[1:])
		out = append(out, g...)
	}
	return out
}
