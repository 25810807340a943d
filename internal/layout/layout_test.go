package layout

import (
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The bounds. Sizes count lines of code: lines with a token of Go on
// them, so that comments, blank lines and generated files count for
// nothing and documentation never competes with code.
const (
	// maxEngineLines bounds the engine, package fsm and its internal
	// packages, tests left out: set at the engine's size, it only goes
	// down. Code that the engine sheds by moving it elsewhere in the
	// repository is not the point; code made simpler is.
	maxEngineLines   = 7730
	maxFileLines     = 600 // any file of the library, tests left out
	maxFunctionLines = 80  // from func to its closing brace, comments included
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

// codeLines counts the lines of path that hold a token of Go, comments
// left out; a generated file counts none.
func codeLines(t *testing.T, path string) int {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if generated.Match(src) {
		return 0
	}
	fset := token.NewFileSet()
	f := fset.AddFile(path, -1, len(src))
	var s scanner.Scanner
	s.Init(f, src, nil, 0) // mode 0: comments are skipped
	lines := map[int]bool{}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue // inserted at a line's end: that line counts by its own tokens
		}
		lines[f.Line(pos)] = true
	}
	return len(lines)
}

// generated matches the header of a generated file, as go generate's
// convention writes it.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

func TestTheEngineStaysUnderItsSize(t *testing.T) {
	total := 0
	for _, path := range sources(t, "fsm") {
		total += codeLines(t, path)
	}
	if total > maxEngineLines {
		t.Errorf("the engine (fsm and fsm/internal) has %d lines of code, tests and comments left out, over its bound of %d: make it simpler", total, maxEngineLines)
	}
}

func TestNoFileOfTheLibraryIsLong(t *testing.T) {
	for _, dir := range library {
		for _, path := range sources(t, dir) {
			if n := codeLines(t, path); n > maxFileLines {
				t.Errorf("%s has %d lines of code, more than %d: it holds two ideas", path, n, maxFileLines)
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
