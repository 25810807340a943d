// Package seeded holds deliberately wrong versions of the examples'
// handlers, each a patch in bugs/, and what it takes to run an example
// with one applied: the check that fsmtest.Explore catches every one of
// them is make seeded-bugs.
//
// A patch starts with a few lines that say what is wrong, then a line
// that says whether fsmtest.Faults, which tries one fault at a time,
// catches it too:
//
//	Faults: catches
//
// or "Faults: misses", and then the diff, as git diff prints it, from the
// repository's root.
package seeded

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

//go:embed bugs/*.patch
var patches embed.FS

// Bug is one seeded bug.
type Bug struct {
	// Name is the patch's file name without .patch.
	Name string
	// What says what is wrong: the lines before the Faults line.
	What string
	// FaultsCatches says whether fsmtest.Faults catches the bug too.
	FaultsCatches bool
	// Example is the directory of the example the patch changes, from the
	// repository's root: examples/moose.
	Example string
	// Files are the files the patch changes, from the repository's root.
	Files []string

	patch []byte
}

var (
	faultsLine = regexp.MustCompile(`(?m)^Faults: (catches|misses)$`)
	fileLine   = regexp.MustCompile(`(?m)^\+\+\+ b/(\S+)$`)
)

// Load returns the bugs of the patches in bugs/, in name order.
func Load() ([]Bug, error) {
	names, err := fs.Glob(patches, "bugs/*.patch")
	if err != nil {
		return nil, err
	}
	var bugs []Bug
	for _, name := range names {
		data, err := patches.ReadFile(name)
		if err != nil {
			return nil, err
		}
		b, err := parse(strings.TrimSuffix(path.Base(name), ".patch"), data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		bugs = append(bugs, b)
	}
	return bugs, nil
}

func parse(name string, data []byte) (Bug, error) {
	b := Bug{Name: name, patch: data}
	diff := bytes.Index(data, []byte("\ndiff --git "))
	if diff < 0 {
		return b, fmt.Errorf("no diff: a patch is a few lines on the bug, a Faults line, then git diff's output")
	}
	head := string(data[:diff])
	m := faultsLine.FindStringSubmatchIndex(head)
	if m == nil {
		return b, fmt.Errorf(`no line "Faults: catches" or "Faults: misses" before the diff`)
	}
	b.What = strings.TrimSpace(head[:m[0]])
	if b.What == "" {
		return b, fmt.Errorf("no lines on what is wrong before the Faults line")
	}
	b.FaultsCatches = head[m[2]:m[3]] == "catches"
	for _, f := range fileLine.FindAllStringSubmatch(string(data[diff:]), -1) {
		b.Files = append(b.Files, f[1])
		dir := path.Dir(f[1])
		if !strings.HasPrefix(dir, "examples/") || strings.HasSuffix(f[1], "_test.go") {
			return b, fmt.Errorf("%s is not a handler file of an example", f[1])
		}
		if b.Example != "" && b.Example != dir {
			return b, fmt.Errorf("the patch changes both %s and %s: one example at a time", b.Example, dir)
		}
		b.Example = dir
	}
	if len(b.Files) == 0 {
		return b, fmt.Errorf("the diff changes no file")
	}
	return b, nil
}

// Overlay applies the patch to copies of its files under tmp, adds the
// files of extra (contents by path from the repository's root), and
// writes a file for go's -overlay flag that puts them in place of root's
// own: go build, vet and test then see the example with the bug, and
// nothing in root changes. It returns the overlay file's path.
func (b Bug) Overlay(root, tmp string, extra map[string]string) (string, error) {
	replace := map[string]string{}
	for _, f := range b.Files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", err
		}
		if err := write(filepath.Join(tmp, f), data); err != nil {
			return "", err
		}
		replace[filepath.Join(root, f)] = filepath.Join(tmp, f)
	}
	apply := exec.Command("git", "apply", "--whitespace=nowarn", "-")
	apply.Dir, apply.Stdin = tmp, bytes.NewReader(b.patch)
	if out, err := apply.CombinedOutput(); err != nil {
		return "", fmt.Errorf("the patch %s no longer applies to %s: %w\n%s", b.Name, strings.Join(b.Files, ", "), err, out)
	}
	for _, f := range slices.Sorted(maps.Keys(extra)) {
		if err := write(filepath.Join(tmp, f), []byte(extra[f])); err != nil {
			return "", err
		}
		replace[filepath.Join(root, f)] = filepath.Join(tmp, f)
	}
	data, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(tmp, "overlay.json")
	return overlay, os.WriteFile(overlay, data, 0o644)
}

func write(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.WriteFile(name, data, 0o644)
}
