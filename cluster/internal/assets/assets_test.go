package assets

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests build a tiny module, so that they exercise the real go build,
// file lock and cache checks in seconds rather than minutes.

func tinySource(message string) Source {
	return Source{
		Name:    "tiny",
		Version: "v0.0.1",
		Files: map[string][]byte{
			"go.mod":        []byte("module example.com/tiny\n\ngo 1.26\n"),
			"hello/main.go": []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(" + fmt.Sprintf("%q", message) + ") }\n"),
		},
	}
}

// tinyGroup builds hello. With a barrier path, the build waits in its finish
// step until that file exists, which lets a test hold a build in progress.
func tinyGroup(barrier string) Group {
	g := Group{Name: "tiny", Packages: []string{"./hello"}, Binaries: []string{"hello"}}
	if barrier != "" {
		g.Finish = func(ctx context.Context, b *Build) error {
			for {
				if _, err := os.Stat(barrier); err == nil {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
	return g
}

func runHello(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(dir, "hello")).Output()
	if err != nil {
		t.Fatalf("running the built binary: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestMain lets the test binary act as a second process that ensures the
// tiny group, for the tests of concurrency between processes.
func TestMain(m *testing.M) {
	if root := os.Getenv("KFSM_ASSETS_HELPER_ROOT"); root != "" {
		c := &Cache{Root: root, Progress: os.Stderr}
		res, err := c.Ensure(context.Background(), tinySource("hello"), tinyGroup(os.Getenv("KFSM_ASSETS_HELPER_BARRIER")))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("built=%t dir=%s\n", res.Built, res.Dir)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helper is another process running Ensure on the same cache.
type helper struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	lines  chan string // standard error, line by line
}

func startHelper(t *testing.T, root, barrier string) *helper {
	t.Helper()
	h := &helper{lines: make(chan string, 100)}
	h.cmd = exec.Command(os.Args[0], "-test.run=^$")
	h.cmd.Env = append(os.Environ(), "KFSM_ASSETS_HELPER_ROOT="+root, "KFSM_ASSETS_HELPER_BARRIER="+barrier)
	h.cmd.Stdout = &h.stdout
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.cmd.Process.Kill() })
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	return h
}

// waitFor reads the helper's standard error until a line contains s.
func (h *helper) waitFor(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper exited before saying %q", s)
			}
			if strings.Contains(l, s) {
				return
			}
		case <-timeout:
			t.Fatalf("helper did not say %q", s)
		}
	}
}

func (h *helper) result(t *testing.T) string {
	t.Helper()
	go func() {
		for range h.lines { //nolint:revive // drain so the helper never blocks on a full pipe
		}
	}()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper failed: %v", err)
	}
	return strings.TrimSpace(h.stdout.String())
}

func TestConcurrentProcessesBuildOnce(t *testing.T) {
	root := t.TempDir()
	barrier := filepath.Join(t.TempDir(), "go")

	first := startHelper(t, root, barrier)
	first.waitFor(t, "building hello")
	second := startHelper(t, root, barrier)
	second.waitFor(t, "waiting for another process")
	if err := os.WriteFile(barrier, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	dir := (&Cache{Root: root}).Dir(tinySource("hello"))
	want := []string{"built=true dir=" + dir, "built=false dir=" + dir}
	got := []string{first.result(t), second.result(t)}
	if got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("results = %q, want %q", got, want)
	}
	if msg := runHello(t, dir); msg != "hello" {
		t.Errorf("built binary printed %q, want hello", msg)
	}
}

func TestConcurrentCallersInOneProcessBuildOnce(t *testing.T) {
	c := &Cache{Root: t.TempDir()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		built int
	)
	for range 4 {
		wg.Go(func() {
			res, err := c.Ensure(t.Context(), tinySource("hello"), tinyGroup(""))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if res.Built {
				built++
			}
		})
	}
	wg.Wait()
	if built != 1 {
		t.Errorf("%d callers built, want 1", built)
	}
}

func TestCrashedBuildIsNotCachedAndDoesNotBlock(t *testing.T) {
	root := t.TempDir()
	crashed := startHelper(t, root, filepath.Join(t.TempDir(), "never"))
	crashed.waitFor(t, "building hello")
	// Killed while its build waits in the finish step, with the lock held.
	if err := crashed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = crashed.cmd.Wait()

	c := &Cache{Root: root}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := c.Ensure(ctx, tinySource("hello"), tinyGroup(""))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Built {
		t.Error("a build that never finished was taken as cached")
	}
	if msg := runHello(t, res.Dir); msg != "hello" {
		t.Errorf("built binary printed %q, want hello", msg)
	}
}

func TestDamagedCacheIsRebuilt(t *testing.T) {
	cases := map[string]struct {
		reason string
		damage func(t *testing.T, dir string)
	}{
		"TruncatedBinary": {
			reason: "a binary cut short, as by a full disk, must not be used",
			damage: func(t *testing.T, dir string) {
				if err := os.Truncate(filepath.Join(dir, "hello"), 100); err != nil {
					t.Fatal(err)
				}
			},
		},
		"AlteredBinary": {
			reason: "a binary whose bytes changed must not be used",
			damage: func(t *testing.T, dir string) {
				f, err := os.OpenFile(filepath.Join(dir, "hello"), os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte("garbage"), 200); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			},
		},
		"MissingBinary": {
			reason: "a deleted binary is rebuilt",
			damage: func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, "hello")); err != nil {
					t.Fatal(err)
				}
			},
		},
		"MissingManifest": {
			reason: "binaries without a manifest are a build that did not finish",
			damage: func(t *testing.T, dir string) {
				if err := os.Remove(manifestPath(dir, tinyGroup(""))); err != nil {
					t.Fatal(err)
				}
			},
		},
		"CorruptManifest": {
			reason: "an unreadable manifest is rebuilt, not trusted",
			damage: func(t *testing.T, dir string) {
				if err := os.WriteFile(manifestPath(dir, tinyGroup("")), []byte("{not json"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var progress bytes.Buffer
			c := &Cache{Root: t.TempDir(), Progress: &progress}
			first, err := c.Ensure(t.Context(), tinySource("hello"), tinyGroup(""))
			if err != nil {
				t.Fatal(err)
			}
			again, err := c.Ensure(t.Context(), tinySource("hello"), tinyGroup(""))
			if err != nil {
				t.Fatal(err)
			}
			if again.Built {
				t.Fatal("an intact cache was rebuilt")
			}
			tc.damage(t, first.Dir)
			res, err := c.Ensure(t.Context(), tinySource("hello"), tinyGroup(""))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Built {
				t.Fatalf("%s: the damaged cache was not rebuilt", tc.reason)
			}
			if msg := runHello(t, res.Dir); msg != "hello" {
				t.Errorf("rebuilt binary printed %q, want hello", msg)
			}
		})
	}
}

func TestCachedSaysWhetherTheBinariesAreBuilt(t *testing.T) {
	c := &Cache{Root: t.TempDir()}
	src, g := tinySource("hello"), tinyGroup("")
	if dir, ok := c.Cached(src, g); ok || dir != c.Dir(src) {
		t.Errorf("Cached() before a build = %s, %t; want %s, false", dir, ok, c.Dir(src))
	}
	if _, err := c.Ensure(t.Context(), src, g); err != nil {
		t.Fatal(err)
	}
	if dir, ok := c.Cached(src, g); !ok || dir != c.Dir(src) {
		t.Errorf("Cached() after a build = %s, %t; want %s, true", dir, ok, c.Dir(src))
	}
	if err := os.Truncate(filepath.Join(c.Dir(src), "hello"), 100); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Cached(src, g); ok {
		t.Error("Cached() takes a damaged binary for a built one")
	}
}

func TestNewSourceGetsNewDirectory(t *testing.T) {
	c := &Cache{Root: t.TempDir()}
	a, err := c.Ensure(t.Context(), tinySource("one"), tinyGroup(""))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Ensure(t.Context(), tinySource("two"), tinyGroup(""))
	if err != nil {
		t.Fatal(err)
	}
	if a.Dir == b.Dir || !b.Built {
		t.Fatalf("a changed source reused %s (built=%t)", a.Dir, b.Built)
	}
	if got := runHello(t, a.Dir) + " " + runHello(t, b.Dir); got != "one two" {
		t.Errorf("binaries printed %q, want %q", got, "one two")
	}
}

func TestBuildFailureNamesStepAndShowsCompilerOutput(t *testing.T) {
	src := tinySource("hello")
	src.Files["hello/main.go"] = []byte("package main\n\nfunc main() { undefinedThing() }\n")
	var progress bytes.Buffer
	c := &Cache{Root: t.TempDir(), Progress: &progress}
	_, err := c.Ensure(t.Context(), src, tinyGroup(""))
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("Ensure() error = %v, want a *BuildError", err)
	}
	if be.Step != "building tiny binaries" {
		t.Errorf("Step = %q, want the build step", be.Step)
	}
	if !strings.Contains(be.Output, "main.go:3") || !strings.Contains(be.Output, "undefinedThing") {
		t.Errorf("Output does not show the compiler's complaint:\n%s", be.Output)
	}
	if _, err := os.Stat(manifestPath(c.Dir(src), tinyGroup(""))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed build left a manifest: %v", err)
	}
}

func TestMissingBinaryIsAnError(t *testing.T) {
	g := tinyGroup("")
	g.Binaries = append(g.Binaries, "missing")
	_, err := (&Cache{Root: t.TempDir()}).Ensure(t.Context(), tinySource("hello"), g)
	if err == nil || !strings.Contains(err.Error(), "produced no missing") {
		t.Fatalf("Ensure() error = %v, want one naming the missing binary", err)
	}
}

// The build says how many packages it has to compile, then how many of
// them it compiled. The source is new to the build cache each time, so
// that there is something to compile however warm the cache is.
func TestProgressCountsThePackagesToCompile(t *testing.T) {
	src := tinySource("hello")
	src.Files["hello/main.go"] = []byte("package main\n\nimport \"example.com/tiny/greeting\"\n\nfunc main() { greeting.Print() }\n")
	src.Files["greeting/greeting.go"] = []byte(fmt.Sprintf("package greeting\n\nimport \"fmt\"\n\nfunc Print() { fmt.Println(%q) }\n", "hello "+time.Now().String()))
	var progress bytes.Buffer
	c := &Cache{Root: t.TempDir(), Progress: &progress}
	if _, err := c.Ensure(t.Context(), src, tinyGroup("")); err != nil {
		t.Fatal(err)
	}
	out := progress.String()
	if !strings.Contains(out, "building hello from tiny v0.0.1") {
		t.Errorf("progress does not say what it builds:\n%s", out)
	}
	found := regexp.MustCompile(`kfsm: (\d+) packages to compile for the tiny binaries\n`).FindStringSubmatch(out)
	ready := regexp.MustCompile(`kfsm: tiny binaries ready: (\d+) of (\d+) packages compiled \(100%\), [0-9hms.]+ elapsed`).FindStringSubmatch(out)
	if found == nil || ready == nil {
		t.Fatalf("progress lacks the count of packages to compile, or the count compiled at the end:\n%s", out)
	}
	if n, _ := strconv.Atoi(found[1]); n < 1 {
		t.Errorf("%d packages to compile; want at least greeting, which is new", n)
	}
	if ready[1] != found[1] || ready[2] != found[1] {
		t.Errorf("compiled %s of %s packages, want all %s found to compile:\n%s", ready[1], ready[2], found[1], out)
	}
}

func TestProgressLine(t *testing.T) {
	cases := map[string]struct {
		reason string
		stale  []string // nil while go list finds them
		lines  []string
		want   string
	}{
		"Finding": {
			reason: "While go list finds the packages, the modules it downloads count.",
			lines:  []string{"go: downloading k8s.io/api v0.36.3", "go: downloading k8s.io/apimachinery v0.36.3"},
			want:   "Ts elapsed, 2 modules downloaded, last: downloading k8s.io/apimachinery v0.36.3",
		},
		"Compiling": {
			reason: "go build -v names each package it compiles; other lines are not packages.",
			stale:  []string{"internal/goarch", "k8s.io/api/core/v1", "k8s.io/api/apps/v1", "k8s.io/kubernetes/pkg/api"},
			lines:  []string{"internal/goarch", "k8s.io/api/core/v1", "# a warning of the compiler"},
			want:   "2 of 4 packages compiled (50%), Ts elapsed, last: compiling k8s.io/api/core/v1",
		},
		"OnlyTheStale": {
			reason: "A package that go list did not count, such as a main package, is not counted compiled, and none twice.",
			stale:  []string{"a"},
			lines:  []string{"a", "a", "k8s.io/kubernetes/cmd/kube-apiserver"},
			want:   "1 of 1 packages compiled (100%), Ts elapsed, last: compiling k8s.io/kubernetes/cmd/kube-apiserver",
		},
		"NothingToCompile": {
			reason: "A build whose packages are all cached says so, rather than count nothing.",
			stale:  []string{},
			want:   "every package was in Go's build cache, Ts elapsed",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := &progress{start: time.Now()}
			if tc.stale != nil {
				p.build(tc.stale)
			}
			for _, l := range tc.lines {
				p.line(l)
			}
			got := regexp.MustCompile(`[0-9hms.]+ elapsed`).ReplaceAllString(p.String(), "Ts elapsed")
			if got != tc.want {
				t.Errorf("%s\nString() = %q\nwant       %q", tc.reason, got, tc.want)
			}
		})
	}
}

func TestCancelledContextStopsTheBuild(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	g := tinyGroup(filepath.Join(t.TempDir(), "never"))
	done := make(chan error, 1)
	c := &Cache{Root: t.TempDir(), Progress: io.Discard}
	go func() {
		_, err := c.Ensure(ctx, tinySource("hello"), g)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Ensure() error = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Ensure did not return after its context was cancelled")
	}
}
