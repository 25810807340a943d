// Package browser provides the headless Chromium that the dashboard's
// tests drive: Debian's chromium package, in whatever version the archive
// serves, unpacked with the libraries it needs into the user cache on
// first use and reused after.
//
// Nothing is installed system-wide and no root is needed once the package
// lists are there: apt-get works out which packages the machine lacks
// (apt-get --simulate install), downloads them (apt-get download) and
// dpkg-deb unpacks them into the cache, where the browser runs with those
// libraries on its library path. Only as root, when apt-get knows no
// chromium package, does it update the package lists first. A file lock
// keeps parallel test binaries from unpacking at once. Remove the cache
// directory to get the archive's newest version.
package browser

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kfsm/kfsm/internal/filelock"
)

// PathEnv names an environment variable: when it is set, it is the path of
// a Chromium or Chrome binary that Find returns as it is, and nothing is
// fetched.
const PathEnv = "KFSM_CHROMIUM"

// Chromium is a browser binary and the environment it runs in.
type Chromium struct {
	// Path is the binary.
	Path string
	// Env holds KEY=value pairs to add to the browser's environment: the
	// library path of the unpacked packages, and a font configuration that
	// also finds the fonts unpacked with them.
	Env []string
	// Version is what the browser says it is, such as
	// "Chromium 148.0.7778.167".
	Version string
}

// Find returns a Chromium that runs: the one PathEnv names, or the one in
// the user cache, which it fetches first when it is missing or does not
// run. It writes what it does to progress (nil discards it); the first
// fetch downloads about 100 MB.
func Find(ctx context.Context, progress io.Writer) (*Chromium, error) {
	if progress == nil {
		progress = io.Discard
	}
	if path := os.Getenv(PathEnv); path != "" {
		c := &Chromium{Path: path}
		if err := c.check(ctx); err != nil {
			return nil, fmt.Errorf("%s=%s: %w", PathEnv, path, err)
		}
		return c, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, fmt.Errorf("finding the user cache directory: %w", err)
	}
	return (&installer{dir: filepath.Join(cache, "kfsm", "chromium"), progress: progress}).ensure(ctx)
}

// check runs the browser to ask its version.
func (c *Chromium) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Path, "--version")
	cmd.Env = append(os.Environ(), c.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 0 {
			err = fmt.Errorf("%w: %s", err, tail(out))
		}
		return fmt.Errorf("running %s --version: %w", c.Path, err)
	}
	c.Version = strings.TrimSpace(string(out))
	return nil
}

// installer keeps one Chromium in dir.
type installer struct {
	dir      string
	progress io.Writer
}

// manifest says where the unpacked browser is, relative to its directory.
// It is written last, so a directory without one is unfinished.
type manifest struct {
	Binary      string   `json:"binary"`
	LibraryPath []string `json:"libraryPath"`
	FontConfig  string   `json:"fontConfig"`
	Packages    []string `json:"packages"`
}

const manifestName = "manifest.json"

// ensure returns the cached browser, unpacking it first when it is
// missing or does not run.
func (in *installer) ensure(ctx context.Context) (*Chromium, error) {
	// A warm cache takes no lock: an unfinished unpacking has no manifest.
	if c, err := in.load(ctx); err == nil {
		return c, nil
	}
	if err := os.MkdirAll(filepath.Dir(in.dir), 0o755); err != nil {
		return nil, fmt.Errorf("creating the cache directory: %w", err)
	}
	unlock, err := filelock.Lock(ctx, in.dir+".lock", func() {
		fmt.Fprintf(in.progress, "browser: waiting for another process that is unpacking Chromium into %s\n", in.dir)
	})
	if err != nil {
		return nil, err
	}
	defer unlock()
	c, err := in.load(ctx)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(in.progress, "browser: the Chromium in %s does not run (%v); unpacking it again\n", in.dir, err)
	}
	if err := in.install(ctx); err != nil {
		return nil, err
	}
	c, err = in.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("the Chromium just unpacked into %s does not run: %w", in.dir, err)
	}
	fmt.Fprintf(in.progress, "browser: %s in %s\n", c.Version, in.dir)
	return c, nil
}

// load reads the manifest and checks that the browser runs.
func (in *installer) load(ctx context.Context) (*Chromium, error) {
	data, err := os.ReadFile(filepath.Join(in.dir, manifestName))
	if err != nil {
		return nil, err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("reading %s: %w", manifestName, err)
	}
	c := &Chromium{Path: filepath.Join(in.dir, m.Binary)}
	var libs []string
	for _, l := range m.LibraryPath {
		libs = append(libs, filepath.Join(in.dir, l))
	}
	if len(libs) > 0 {
		c.Env = append(c.Env, "LD_LIBRARY_PATH="+strings.Join(libs, string(os.PathListSeparator)))
	}
	if m.FontConfig != "" {
		c.Env = append(c.Env, "FONTCONFIG_FILE="+filepath.Join(in.dir, m.FontConfig))
	}
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// The binary and its data, as Debian's chromium package lays them out.
const debianBinary = "usr/lib/chromium/chromium"

// install fetches chromium and the packages it needs that the machine
// lacks, and unpacks them into a new directory that then replaces dir.
func (in *installer) install(ctx context.Context) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("no Chromium: fetching one needs Debian's apt-get, which is not here (%w); set %s to a Chromium or Chrome binary", err, PathEnv)
	}
	pkgs, err := in.packages(ctx)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(in.dir), "."+filepath.Base(in.dir)+"-")
	if err != nil {
		return fmt.Errorf("creating a directory to unpack into: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	debs := filepath.Join(work, "debs")
	if err := os.Mkdir(debs, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(in.progress, "browser: fetching Debian's chromium and %d packages it needs (about 100 MB, once) into %s\n", len(pkgs)-1, in.dir)
	if _, err := run(ctx, debs, "apt-get", append([]string{"download", "-q"}, pkgs...)...); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(debs, "*.deb"))
	if err != nil {
		return err
	}
	if len(files) < len(pkgs) {
		return fmt.Errorf("apt-get download fetched %d packages of the %d asked for", len(files), len(pkgs))
	}
	root := filepath.Join(work, "root")
	for _, f := range files {
		if _, err := run(ctx, "", "dpkg-deb", "-x", f, root); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(debs); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, debianBinary)); err != nil {
		return fmt.Errorf("the chromium package holds no %s: %w", debianBinary, err)
	}
	libs, err := libraryDirs(work, "root")
	if err != nil {
		return err
	}
	m := manifest{Binary: filepath.Join("root", debianBinary), LibraryPath: libs, FontConfig: "fonts.conf", Packages: pkgs}
	if err := os.WriteFile(filepath.Join(work, m.FontConfig), fontConfig(in.dir), 0o644); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, manifestName), data, 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(in.dir); err != nil {
		return fmt.Errorf("removing the old Chromium: %w", err)
	}
	return os.Rename(work, in.dir)
}

// packages lists the packages to fetch: chromium, and those it needs that
// the machine lacks. As root, it updates the package lists when apt-get
// knows no chromium package, as on a fresh machine.
func (in *installer) packages(ctx context.Context) ([]string, error) {
	simulate := func() ([]byte, error) {
		return run(ctx, "", "apt-get", "--simulate", "--no-install-recommends", "install", "chromium")
	}
	out, err := simulate()
	if err != nil {
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("%w\n(the package lists may be missing: run apt-get update as root, or set %s to a Chromium or Chrome binary)", err, PathEnv)
		}
		fmt.Fprintln(in.progress, "browser: updating the package lists")
		if _, err := run(ctx, "", "apt-get", "update", "-q"); err != nil {
			return nil, err
		}
		if out, err = simulate(); err != nil {
			return nil, err
		}
	}
	return toInstall(out), nil
}

// toInstall reads what apt-get --simulate install would install, and
// adds chromium and its data, which are fetched even when the system has
// them so that the cache is complete.
func toInstall(simulated []byte) []string {
	var pkgs []string
	sc := bufio.NewScanner(bytes.NewReader(simulated))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "Inst" {
			pkgs = append(pkgs, fields[1])
		}
	}
	for _, p := range []string{"chromium-common", "chromium"} {
		if !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// libraryDirs lists the directories under base/root that hold shared
// libraries, relative to base.
func libraryDirs(base, root string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(base, root), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.") {
			rel, err := filepath.Rel(base, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[rel] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	return dirs, nil
}

// fontConfig is a fontconfig configuration that reads the system's, when
// there is one, and adds the fonts unpacked into dir: on a machine without
// fonts, the packages bring one.
func fontConfig(dir string) []byte {
	return fmt.Appendf(nil, `<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <include ignore_missing="yes">/etc/fonts/fonts.conf</include>
  <dir>%s</dir>
  <cachedir>%s</cachedir>
</fontconfig>
`, filepath.Join(dir, "root", "usr", "share", "fonts"), filepath.Join(dir, "fontconfig-cache"))
}

// run runs a command in dir and returns its output, or an error with the
// output's tail.
func run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(out.Bytes()))
	}
	return out.Bytes(), nil
}

// tail is the end of a command's output, for an error message.
func tail(out []byte) string {
	const keep = 2000
	s := strings.TrimSpace(string(out))
	if len(s) > keep {
		s = "..." + s[len(s)-keep:]
	}
	return s
}
