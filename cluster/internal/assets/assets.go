// Package assets builds Go binaries from a pinned module and keeps them in a
// cache directory that concurrent processes share safely.
//
// A Source is a Go module given as file contents (its go.mod, go.sum and any
// package of its own). A Group names binaries built from it together. Ensure
// returns the directory holding a group's binaries, building them on first
// use. The directory is keyed by a hash of the source, so a new pin never
// reuses old binaries.
//
// A group counts as present only when its manifest is present and every file
// it lists has the recorded size and SHA-256. The manifest is written last, by
// rename, so a build that stopped half-way is never taken for a finished one,
// and a truncated or altered binary is rebuilt.
package assets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kfsm/kfsm/internal/filelock"
)

// Source is a Go module whose packages are built into binaries.
type Source struct {
	// Name and Version make the cache directory readable, for example
	// "k8s" and "v1.36.3".
	Name, Version string
	// Files maps slash-separated paths relative to the module root to their
	// contents. It holds at least go.mod and go.sum.
	Files map[string][]byte
}

// Group is a set of binaries built together from one Source.
type Group struct {
	// Name identifies the group in messages and in its manifest file name.
	Name string
	// Packages are the main packages to build, as import paths or as paths
	// relative to the module root ("./etcd").
	Packages []string
	// Binaries are the file names the build must produce.
	Binaries []string
	// Finish, when set, runs after the build with the module directory and
	// the directory the binaries were built into; the files it writes there
	// are installed and checked with the binaries.
	Finish func(ctx context.Context, b *Build) error
}

// Build is a build in progress, handed to Group.Finish.
type Build struct {
	// ModuleDir is the directory the Source was written to.
	ModuleDir string
	// OutDir is where the binaries are; files written here are installed.
	OutDir string
	cache  *Cache
}

// Go runs the go command in the module directory and returns its standard
// output, or an error naming step with the tail of the command's output.
func (b *Build) Go(ctx context.Context, step string, args ...string) ([]byte, error) {
	return b.cache.run(ctx, b.ModuleDir, step, nil, args...)
}

// Cache is a directory of built binaries.
type Cache struct {
	// Root is the directory under which each Source gets its own folder.
	Root string
	// Progress receives human-readable progress; nil discards it.
	Progress io.Writer
}

// Result says where a group's binaries are and whether this call built them.
type Result struct {
	Dir   string
	Built bool
}

// Dir returns the folder that holds the binaries of src.
func (c *Cache) Dir(src Source) string {
	return filepath.Join(c.Root, fmt.Sprintf("%s-%s-%s-%s-%s", src.Name, src.Version, runtime.GOOS, runtime.GOARCH, src.hash()[:12]))
}

// Ensure returns the directory holding g's binaries, building them first
// when they are missing, incomplete or altered. Concurrent callers, in this
// process or others, build once: the others wait and reuse the result.
func (c *Cache) Ensure(ctx context.Context, src Source, g Group) (Result, error) {
	dir := c.Dir(src)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("creating asset cache: %w", err)
	}
	// The common case, a warm cache, takes no lock. Verification reads only,
	// and a build in progress never leaves a manifest that verifies.
	if c.verify(dir, g) == nil {
		return Result{Dir: dir}, nil
	}
	unlock, err := filelock.Lock(ctx, dir+".lock", func() {
		c.printf("waiting for another process that is building %s in %s\n", g.Name, dir)
	})
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	err = c.verify(dir, g)
	if err == nil {
		return Result{Dir: dir}, nil
	}
	if !errors.Is(err, errNoManifest) {
		c.printf("cached %s binaries in %s are not usable (%v); rebuilding\n", g.Name, dir, err)
	}
	if err := c.build(ctx, src, g, dir); err != nil {
		return Result{}, err
	}
	if err := c.verify(dir, g); err != nil {
		return Result{}, fmt.Errorf("checking freshly built %s binaries: %w", g.Name, err)
	}
	return Result{Dir: dir, Built: true}, nil
}

// Cached returns the directory of g's binaries when they are built
// already, as Ensure would find them, and whether they are.
func (c *Cache) Cached(src Source, g Group) (string, bool) {
	dir := c.Dir(src)
	return dir, c.verify(dir, g) == nil
}

var errNoManifest = errors.New("no manifest")

type manifest struct {
	Group string          `json:"group"`
	Files []manifestEntry `json:"files"`
}

type manifestEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func manifestPath(dir string, g Group) string {
	return filepath.Join(dir, "."+g.Name+".manifest.json")
}

// verify reports why the group in dir is not usable, or nil.
func (c *Cache) verify(dir string, g Group) error {
	data, err := os.ReadFile(manifestPath(dir, g))
	if errors.Is(err, os.ErrNotExist) {
		return errNoManifest
	}
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("manifest is corrupt: %w", err)
	}
	for _, bin := range g.Binaries {
		if !slices.ContainsFunc(m.Files, func(e manifestEntry) bool { return e.Name == bin }) {
			return fmt.Errorf("manifest does not list %s", bin)
		}
	}
	for _, e := range m.Files {
		size, sum, err := fileDigest(filepath.Join(dir, e.Name))
		if err != nil {
			return err
		}
		if size != e.Size || sum != e.SHA256 {
			return fmt.Errorf("%s differs from the build (size %d, want %d)", e.Name, size, e.Size)
		}
	}
	return nil
}

func fileDigest(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

func (c *Cache) build(ctx context.Context, src Source, g Group, dir string) error {
	work, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+"-build-")
	if err != nil {
		return fmt.Errorf("creating build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	b := &Build{ModuleDir: filepath.Join(work, "src"), OutDir: filepath.Join(work, "out"), cache: c}
	if err := src.write(b.ModuleDir); err != nil {
		return err
	}
	if err := os.MkdirAll(b.OutDir, 0o755); err != nil {
		return err
	}

	c.printf("building %s from %s %s into %s\n", strings.Join(g.Binaries, ", "), src.Name, src.Version, dir)
	c.printf("this happens once per version and can take several minutes on a small machine; later runs reuse the cache\n")
	// go list names the packages that go build -v will name as it
	// compiles them: those that the build cache does not hold. A main
	// package is stale whenever its binary is not installed, compiled or
	// not, so mains do not count.
	p := &progress{start: time.Now()}
	args := slices.Concat([]string{"list", "-deps", "-f", `{{if and .Stale (ne .Name "main")}}{{.ImportPath}}{{end}}`}, buildFlags, g.Packages)
	out, err := c.run(ctx, b.ModuleDir, "finding the packages of the "+g.Name+" binaries", p, args...)
	if err != nil {
		return err
	}
	stale := strings.Fields(string(out))
	c.printf("%d packages to compile for the %s binaries\n", len(stale), g.Name)
	p.build(stale)
	args = slices.Concat([]string{"build", "-v"}, buildFlags, []string{"-o", b.OutDir + string(filepath.Separator)}, g.Packages)
	if _, err := c.run(ctx, b.ModuleDir, "building "+g.Name+" binaries", p, args...); err != nil {
		return err
	}
	if g.Finish != nil {
		if err := g.Finish(ctx, b); err != nil {
			return fmt.Errorf("finishing %s binaries: %w", g.Name, err)
		}
	}
	if err := install(b.OutDir, dir, manifestPath(dir, g), g); err != nil {
		return err
	}
	c.printf("%s binaries ready: %s\n", g.Name, p)
	return nil
}

// install moves the built files into dir and writes the manifest last, so
// that the group verifies only once every file is in place.
func install(out, dir, manifestFile string, g Group) error {
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	m := manifest{Group: g.Name}
	for _, e := range entries {
		size, sum, err := fileDigest(filepath.Join(out, e.Name()))
		if err != nil {
			return err
		}
		m.Files = append(m.Files, manifestEntry{Name: e.Name(), Size: size, SHA256: sum})
	}
	for _, bin := range g.Binaries {
		if !slices.ContainsFunc(m.Files, func(e manifestEntry) bool { return e.Name == bin }) {
			return fmt.Errorf("the build of %s produced no %s", g.Name, bin)
		}
	}
	// Drop the old manifest first: a crash between the renames below must
	// not leave a manifest that describes a mix of old and new files.
	if err := os.Remove(manifestFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range m.Files {
		if err := os.Rename(filepath.Join(out, e.Name), filepath.Join(dir, e.Name)); err != nil {
			return fmt.Errorf("installing %s: %w", e.Name, err)
		}
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := manifestFile + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, manifestFile)
}

// buildFlags make the binaries independent of where they were built and
// leave out debugging symbols, which halves their size.
var buildFlags = []string{"-trimpath", "-ldflags=-s -w"}

// hash identifies the source and how it is built.
func (src Source) hash() string {
	h := sha256.New()
	fmt.Fprintf(h, "%q\x00", buildFlags)
	for _, name := range slices.Sorted(maps.Keys(src.Files)) {
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(src.Files[name]))
		h.Write(src.Files[name])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (src Source) write(dir string) error {
	for name, data := range src.Files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return fmt.Errorf("writing module file %s: %w", name, err)
		}
	}
	return nil
}

func (c *Cache) printf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "kfsm: "+format, args...)
	}
}
