package layout

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bounds, in lines as wc -l counts them: comments, blank lines and
// generated code included.
const (
	maxPackageLines  = 6500 // package fsm, its tests left out
	maxFileLines     = 700  // any file of the library, tests left out
	maxFunctionLines = 80   // from func to its closing brace
)

// The library's packages, relative to the repository's root; each
// stands for its directory and those below it.
var library = []string{"fsm", "graph", "cluster", "fsmtest", "fsmvet"}

// sources returns the Go files of the tree under dir, relative to the
// repository's root, tests left out.
func sources(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join("..", "..", dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files under %s", dir)
	}
	return files
}

func lines(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

func TestPackageFsmStaysUnderItsSize(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "fsm", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, path := range paths {
		if !strings.HasSuffix(path, "_test.go") {
			total += lines(t, path)
		}
	}
	if total >= maxPackageLines {
		t.Errorf("package fsm has %d lines, tests left out; keep it under %d by moving a mechanism that does not need Machine[T] to fsm/internal", total, maxPackageLines)
	}
}

func TestNoFileOfTheLibraryIsLong(t *testing.T) {
	for _, dir := range library {
		for _, path := range sources(t, dir) {
			if n := lines(t, path); n > maxFileLines {
				t.Errorf("%s has %d lines, more than %d: it holds two ideas", path, n, maxFileLines)
			}
		}
	}
}

func TestNoFunctionOfTheEngineIsLong(t *testing.T) {
	fset := token.NewFileSet()
	for _, path := range sources(t, "fsm") {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > maxFunctionLines {
				t.Errorf("%s:%d: %s has %d lines, more than %d", path, start.Line, fn.Name.Name, n, maxFunctionLines)
			}
		}
	}
}
