package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"sigs.k8s.io/krew/pkg/index"
)

// A user of kfsm, whose go command finds kfsm's modules at the tags of
// the released repository, as the public module proxy finds them at
// GitHub's (a module in a subdirectory at the tag dir/version, by the go
// command's own rule, not the release's), everything else at the public
// proxy, and has a module cache of their own, empty at first. The build
// cache is the machine's: it is keyed by the content of what it builds,
// so it cannot change what the user gets, and one of the user's own would
// take gigabytes of disk on every run.
type user struct {
	env []string
	bin string
}

func newUser(t *testing.T, repo string) user {
	out, err := exec.CommandContext(t.Context(), "go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	home := t.TempDir()
	u := user{bin: filepath.Join(home, "bin")}
	u.env = append(os.Environ(),
		"GOWORK=off",
		"GOPROXY=https://proxy.golang.org",
		// kfsm's modules directly from the repository (the checksum
		// database knows no release that is not published: the go
		// command does not ask it about them; the go.sum files of the
		// tagged modules are checked against what it fetched, at the
		// end), which git, run by the go command, reads from the clone.
		"GOPRIVATE=github.com/kfsm/kfsm", "GONOPROXY=", "GONOSUMDB=",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=url.file://"+filepath.ToSlash(repo)+".insteadOf", "GIT_CONFIG_VALUE_0=https://github.com/kfsm/kfsm",
		"GIT_ALLOW_PROTOCOL=file",
		// -modcacherw lets the test remove the module cache. -trimpath
		// keys what the user builds by module and version rather than by
		// the directory of this run's module cache, so the machine's
		// build cache serves it, as it would for a user whose module
		// cache stays where it is; without it every run compiled every
		// dependency again, twice (the project's tests have the race
		// detector on).
		"GOFLAGS=-modcacherw -trimpath",
		"GOMODCACHE="+filepath.Join(home, "mod"),
		"GOCACHE="+strings.TrimSpace(string(out)),
		"GOBIN="+u.bin,
	)
	return u
}

// run runs a command in dir as the user does, with its output going to
// the test's output as it comes under go test -v.
func (u user) run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	u.exec(t, true, dir, name, args...)
}

// output runs a command in dir as the user does and returns its standard
// output; only its standard error goes to the test's output.
func (u user) output(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	return u.exec(t, false, dir, name, args...)
}

func (u user) exec(t *testing.T, stream bool, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = u.env
	var stdout bytes.Buffer
	var all lockedBuffer // both the command's outputs write to it, each from a goroutine of its own
	progress := io.Discard
	if testing.Verbose() {
		progress = os.Stderr
	}
	cmd.Stderr = io.MultiWriter(&all, progress)
	cmd.Stdout = io.MultiWriter(&stdout, &all)
	if stream {
		cmd.Stdout = io.MultiWriter(&stdout, &all, progress)
	}
	line := strings.Join(append([]string{filepath.Base(name)}, args...), " ")
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s, in %s: %s", line, dir, time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, tail(all.String(), 60))
	}
	return stdout.String()
}

// lockedBuffer is a buffer that two goroutines may write to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// releasedClone clones the repository's commit (not the changes not
// committed), and in the clone, with no tag of the repository's, makes
// the release with make release, told that the commit passed its tests.
// It returns the clone.
func releasedClone(t *testing.T, repo, version string) string {
	t.Helper()
	head := gitT(t, repo, "rev-parse", "HEAD")
	clone := filepath.Join(t.TempDir(), "kfsm")
	gitT(t, repo, "clone", "--quiet", "--no-tags", repo, clone)
	gitT(t, clone, "fetch", "--quiet", "origin", head)
	gitT(t, clone, "checkout", "--quiet", "-B", "release-test", head)
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "release", "VERSION="+version, "TESTED="+head)
	cmd.Dir = clone
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release VERSION=%s in a clone of %s: %v\n%s", version, head, err, out)
	}
	t.Logf("released %s of commit %s in a clone", version, head)
	return clone
}

// wantRequires fails the test unless the go.mod in dir requires the
// module at the version, and replaces nothing.
func wantRequires(t *testing.T, dir, path, version string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range f.Require {
		found = found || r.Mod.Path == path && r.Mod.Version == version
	}
	if !found || len(f.Replace) > 0 {
		t.Errorf("%s does not require %s %s, or replaces a module:\n%s", filepath.Join(dir, "go.mod"), path, version, data)
	}
}

// The release as its users get it: make release tags a clone of this
// commit and builds the kubectl plugin's archives and krew's manifest.
// krew's validator passes the manifest, and krew installs the plugin from
// it and each platform's archive; it refuses a broken manifest. The go
// command fetches kfsm's modules at the clone's tags, and, with a module
// cache that starts empty, go install installs kfsm, kfsm init writes a
// project that requires the release and passes its own make verify, make
// vet (and go vet with kfsm-vet, installed as kfsm is) and make test, and
// go get gets the CloudEvents sink. Outside the workspace, the tagged tree's modules
// load as their go.mod and go.sum say. The build cache and the Kubernetes
// binaries in the user cache directory are the machine's.
func TestAUserInstallsTheRelease(t *testing.T) {
	isolateGit(t)
	const version = "v0.1.0"
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	clone := releasedClone(t, repo, version)
	t.Run("Krew", func(t *testing.T) { installsWithKrew(t, clone, version) })
	t.Run("KrewRefusesABrokenManifest", func(t *testing.T) { krewRefusesABrokenManifest(t, clone, version) })

	mods, err := workspaceModules(clone)
	if err != nil {
		t.Fatal(err)
	}
	u := newUser(t, clone)

	u.run(t, t.TempDir(), "go", "install", "github.com/kfsm/kfsm/cmd/kfsm@"+version)
	kfsm := filepath.Join(u.bin, "kfsm")
	if out := u.output(t, t.TempDir(), kfsm, "version"); !strings.HasPrefix(out, "kfsm "+version+", ") {
		t.Errorf("kfsm version printed %q, want kfsm %s first", out, version)
	}
	if out := u.output(t, t.TempDir(), "go", "list", "-m", "github.com/kfsm/kfsm/cmd@latest"); out != "github.com/kfsm/kfsm/cmd "+version+"\n" {
		t.Errorf("the latest kfsm command is %q, want %s", out, version)
	}

	work := t.TempDir()
	u.run(t, work, kfsm, "init", "widget", "--module", "example.com/widget", "--kind", "Widget", "--group", "example.com")
	project := filepath.Join(work, "widget")
	wantRequires(t, project, "github.com/kfsm/kfsm", version)
	u.run(t, project, "make", "verify")
	u.run(t, project, "make", "vet")
	u.run(t, t.TempDir(), "go", "install", "github.com/kfsm/kfsm/cmd/kfsm-vet@"+version)
	u.run(t, project, "go", "vet", "-vettool="+filepath.Join(u.bin, "kfsm-vet"), "./...")
	u.run(t, project, "make", "test")

	sink := t.TempDir()
	u.run(t, sink, "go", "mod", "init", "example.com/sink")
	u.run(t, sink, "go", "get", "github.com/kfsm/kfsm/cesink@"+version)
	write(t, sink, "main.go", "package main\n\nimport _ \"github.com/kfsm/kfsm/cesink\"\n\nfunc main() {}\n")
	u.output(t, sink, "go", "list", "-deps", ".")
	wantRequires(t, sink, "github.com/kfsm/kfsm/cesink", version)
	wantRequires(t, sink, "github.com/kfsm/kfsm", version)

	for _, m := range mods {
		if len(m.requires) > 0 {
			u.output(t, filepath.Join(clone, m.dir), "go", "list", "-mod=readonly", "-deps", "-test", "./...")
		}
	}
}

// installsWithKrew checks the plugin that make release built into the
// clone's dist/: krew's validator passes fsm.yaml; krew installs the
// plugin from it and each platform's archive, as krew on that platform
// does, with the binary built for it at the release and the LICENSE; and
// the binary of this machine's platform, run from krew's bin directory,
// names the release.
func installsWithKrew(t *testing.T, clone, version string) {
	k := buildKrew(t)
	p := kubectlFsm("https://github.com/kfsm/kfsm/releases/download/{version}")
	dist := filepath.Join(clone, distDir)
	manifest := filepath.Join(dist, p.name+".yaml")
	if err := k.validate(t, manifest); err != nil {
		t.Fatalf("validate-krew-manifest refuses %s: %v", manifest, err)
	}
	m := readManifest(t, manifest)
	if m.Spec.Version != version || len(m.Spec.Platforms) != len(p.platforms) {
		t.Fatalf("the manifest is of %q with %d platforms, want %s with %d", m.Spec.Version, len(m.Spec.Platforms), version, len(p.platforms))
	}
	var sums strings.Builder
	for i, on := range p.platforms {
		name := p.archiveName(version, on)
		sum := sha256File(t, filepath.Join(dist, name))
		fmt.Fprintf(&sums, "%s  %s\n", sum, name)
		if got := m.Spec.Platforms[i]; got.Sha256 != sum || got.URI != "https://github.com/kfsm/kfsm/releases/download/"+version+"/"+name {
			t.Errorf("the manifest's platform %s downloads %s with SHA-256 %s, want the release's %s with %s", on, got.URI, got.Sha256, name, sum)
		}
	}
	if data, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS")); err != nil || string(data) != sums.String() {
		t.Errorf("SHA256SUMS is\n%s(%v)\nwant\n%s", data, err, sums.String())
	}

	for _, on := range p.platforms {
		root, err := k.install(t, manifest, filepath.Join(dist, p.archiveName(version, on)), on)
		if err != nil {
			t.Errorf("krew install of the plugin for %s: %v", on, err)
			continue
		}
		bin := filepath.Join(root, "bin", p.executable(on))
		if err := builtAt(bin, "github.com/kfsm/kfsm", version, on); err != nil {
			t.Errorf("krew installed for %s: %v", on, err)
		}
		if _, err := os.Stat(filepath.Join(root, "store", p.name, version, "LICENSE")); err != nil {
			t.Errorf("krew installed no LICENSE for %s: %v", on, err)
		}
		if on != (platform{runtime.GOOS, runtime.GOARCH}) {
			continue
		}
		out, err := exec.CommandContext(t.Context(), bin, "version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "kubectl fsm "+version+", ") {
			t.Errorf("kubectl-fsm version, installed by krew, printed %q (%v), want kubectl fsm %s first", out, err, version)
		}
	}
}

// krewRefusesABrokenManifest checks that the checks of installsWithKrew
// can fail: krew's validator or krew install refuses each manifest that
// is broken in a way that a user's install would trip on.
func krewRefusesABrokenManifest(t *testing.T, clone, version string) {
	k := buildKrew(t)
	p := kubectlFsm("https://github.com/kfsm/kfsm/releases/download/{version}")
	dist := filepath.Join(clone, distDir)
	on := platform{"linux", "amd64"}
	for name, tc := range map[string]struct {
		reason string
		// file is the manifest's file name, fsm.yaml unless it is set.
		file   string
		change func(m *index.Plugin)
		// byInstall is whether krew install refuses it, which krew's
		// validator passes; otherwise the validator refuses it.
		byInstall bool
	}{
		"WrongSha256": {
			reason:    "krew install checks the archive against the manifest's SHA-256.",
			change:    func(m *index.Plugin) { m.Spec.Platforms[0].Sha256 = m.Spec.Platforms[1].Sha256 },
			byInstall: true,
		},
		"BinNotInTheArchive": {
			reason:    "krew install links the bin that the archive holds.",
			change:    func(m *index.Plugin) { m.Spec.Platforms[0].Bin = "kubectl-other" },
			byInstall: true,
		},
		"NameNotTheFileName": {
			reason: "krew's index finds a plugin by its file name.",
			file:   "kubectl-fsm.yaml",
			change: func(*index.Plugin) {},
		},
		"OverlappingPlatforms": {
			reason: "One platform selects each os and arch.",
			change: func(m *index.Plugin) { delete(m.Spec.Platforms[1].Selector.MatchLabels, "arch") },
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := readManifest(t, filepath.Join(dist, p.name+".yaml"))
			tc.change(&m)
			file := tc.file
			if file == "" {
				file = p.name + ".yaml"
			}
			manifest := filepath.Join(t.TempDir(), file)
			writeManifest(t, manifest, m)
			err := k.validate(t, manifest)
			if !tc.byInstall {
				if err == nil {
					t.Errorf("%s\nvalidate-krew-manifest passed the broken manifest", tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s\nvalidate-krew-manifest refused it; krew install is the check that must: %v", tc.reason, err)
			}
			root, err := k.install(t, manifest, filepath.Join(dist, p.archiveName(version, on)), on)
			if err == nil {
				t.Errorf("%s\nkrew install installed the plugin from the broken manifest", tc.reason)
			}
			if _, err := os.Lstat(filepath.Join(root, "bin", p.executable(on))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s\nkrew install left the plugin in its bin directory (%v)", tc.reason, err)
			}
		})
	}
}
