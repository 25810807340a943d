package dashboard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// graphvizChildEnv makes this test binary a child process that, instead
// of running the tests, initialises the package, prints its temporary
// directory and exits ("init"), or lays out a graph first ("layout").
const graphvizChildEnv = "KFSM_DASHBOARD_GRAPHVIZ_CHILD"

func graphvizChild(what string) int {
	fmt.Print(os.TempDir())
	if what == "layout" {
		if _, err := layoutAfresh(fleetGraph()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// go-graphviz compiles Graphviz's WebAssembly to native code and caches
// the result. Another user of the machine got to the shared temporary
// directory first and made go-graphviz's cache there, open to all: the
// process neither writes to it nor runs what it finds there (a cache it
// used would have the compiled code written into it, since it holds
// none). The code is kept in the user's own cache directory, writable by
// the user alone, or, where that directory is open to others, in memory.
func TestGraphvizCachesOnlyInTheUsersOwnDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test runs processes that compile graphviz from nothing")
	}
	// Each case's children run in turn on one user cache directory; only
	// the first of a case starts with nothing compiled.
	type child struct {
		reason     string
		what       string
		wantCached bool
	}
	cases := map[string]struct {
		userCache fs.FileMode // the mode of the user cache directory
		children  []child
	}{
		"UserCache": {userCache: 0o700, children: []child{{
			reason:     "go-graphviz compiles when the package is initialised, so a process that lays out nothing caches all the same, and only in the user's cache.",
			what:       "init",
			wantCached: true,
		}, {
			reason:     "A process that finds the compiled code in the user's cache lays out with it, and leaves the cache as it was.",
			what:       "layout",
			wantCached: true,
		}}},
		"UserCacheOpenToAll": {userCache: 0o777, children: []child{{
			reason:     "A user cache that others may write is not used: the compiled code stays in memory.",
			what:       "layout",
			wantCached: false,
		}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			shared := filepath.Join(t.TempDir(), "tmp")
			planted := filepath.Join(shared, "go-graphviz")
			userCache := filepath.Join(t.TempDir(), "cache")
			for dir, mode := range map[string]fs.FileMode{shared: 0o777, planted: 0o777, userCache: tc.userCache} {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, mode); err != nil {
					t.Fatal(err)
				}
			}
			cache := filepath.Join(userCache, "kfsm", "graphviz")
			var before map[string]time.Time
			for _, c := range tc.children {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "TMPDIR="+shared, "XDG_CACHE_HOME="+userCache, graphvizChildEnv+"="+c.what)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("the %s child process: %v\n%s", c.what, err, stderr.String())
				}
				if string(out) != shared {
					t.Errorf("the child's temporary directory is %s, want its TMPDIR, %s", out, shared)
				}
				if diff := cmp.Diff([]string{"go-graphviz"}, files(t, shared)); diff != "" {
					t.Errorf("%s\nthe shared temporary directory (-want +got):\n%s", c.reason, diff)
				}
				cached := modTimes(t, cache)
				if got := len(cached) > 0; got != c.wantCached {
					t.Errorf("%s\n%s holds %q; want something cached: %t", c.reason, cache, files(t, cache), c.wantCached)
				}
				if before != nil {
					if diff := cmp.Diff(before, cached); diff != "" {
						t.Errorf("%s\nthe cache changed (-before +after):\n%s", c.reason, diff)
					}
				}
				before = cached
				if !c.wantCached {
					continue
				}
				fi, err := os.Lstat(cache)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := fi.Mode(), fs.ModeDir|0o700; got != want {
					t.Errorf("%s\n%s has mode %v, want %v", c.reason, cache, got, want)
				}
			}
		})
	}
}

// modTimes are the modification times of the files under dir, by their
// paths relative to it.
func modTimes(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	for _, rel := range files(t, dir) {
		fi, err := os.Stat(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		out[rel] = fi.ModTime()
	}
	return out
}

// files are the paths under dir, relative to it, or nil if it is absent.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			rel, _ := filepath.Rel(dir, path)
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return paths
}
