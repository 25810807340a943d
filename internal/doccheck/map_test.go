package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The README's opening names every directory at the top level with a
// link to it, and CONTRIBUTING.md's layout gives each a row: a newcomer
// who reads either and then ls finds nothing unnamed.
func TestTheMapsNameEveryTopLevelDirectory(t *testing.T) {
	root := filepath.Join("..", "..")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	readme := Read(t, filepath.Join(root, "README.md"))
	opening, _, ok := strings.Cut(readme, "\n## ")
	if !ok {
		t.Fatal("README.md has no section after its opening")
	}
	contributing := Read(t, filepath.Join(root, "CONTRIBUTING.md"))
	_, layout, ok := strings.Cut(contributing, "\n## Layout\n")
	if !ok {
		t.Fatal("CONTRIBUTING.md has no Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	// What builds leave: the directories that .gitignore keeps out.
	ignored := map[string]bool{}
	for line := range strings.Lines(Read(t, filepath.Join(root, ".gitignore"))) {
		if name, ok := strings.CutSuffix(strings.TrimSpace(line), "/"); ok {
			ignored[name] = true
		}
	}
	var dirs int
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || ignored[name] {
			continue
		}
		dirs++
		if !strings.Contains(opening, "]("+name+")") && !strings.Contains(opening, "]("+name+"/") {
			t.Errorf("README.md's opening does not link %s/", name)
		}
		if !strings.Contains(layout, "| `"+name+"/") {
			t.Errorf("CONTRIBUTING.md's layout has no row for %s/", name)
		}
	}
	if dirs < 10 {
		t.Fatalf("found only %d directories at the top level", dirs)
	}
}

// docs/architecture.md gives each package of the engine a row and names
// each file of package fsm: a file added or renamed is placed there too.
func TestTheArchitectureNamesEveryPartOfTheEngine(t *testing.T) {
	root := filepath.Join("..", "..")
	doc := Read(t, filepath.Join(root, "docs", "architecture.md"))
	var packages, files int
	err := filepath.WalkDir(filepath.Join(root, "fsm"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && d.Name() == "testdata":
			return filepath.SkipDir
		case d.IsDir():
			if sources, _ := filepath.Glob(filepath.Join(path, "*.go")); len(sources) == 0 {
				return nil // fsm/internal: packages, not one
			}
			packages++
			if !strings.Contains(doc, "| [`"+rel+"`](../"+rel+")") {
				t.Errorf("docs/architecture.md has no row for package %s", rel)
			}
		case filepath.Dir(rel) == "fsm" && strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") &&
			d.Name() != "doc.go" && !strings.HasPrefix(d.Name(), "zz_generated"):
			files++
			if !strings.Contains(doc, "`"+d.Name()+"`") {
				t.Errorf("docs/architecture.md does not name %s", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if packages < 5 || files < 20 {
		t.Fatalf("found only %d packages and %d files of the engine", packages, files)
	}
}
