package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/krew/pkg/index"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// The manifest of kfsm's plugin, for archives whose sums are made up: what
// make release writes, but for the sums, is in testdata/fsm.yaml.
func TestReleaseKrewManifestOfKubectlFsm(t *testing.T) {
	p := kubectlFsm("https://github.com/kfsm/kfsm/releases/download/{version}")
	var archives []archive
	for i, on := range p.platforms {
		archives = append(archives, archive{platform: on, name: p.archiveName("v0.1.0", on), sha256: strings.Repeat(string(rune('a'+i)), 64)})
	}
	got, err := krewManifest(p, "v0.1.0", archives)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "fsm.yaml"), got)
	if bytes.Contains(got, []byte("creationTimestamp")) {
		t.Errorf("the manifest has a creationTimestamp, which krew's index does not want:\n%s", got)
	}
}

// golden compares got with the file at name; under -update, it writes
// got there instead.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("%v (go test -run '^%s$' -update writes it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got; go test -run '^%s$' -update rewrites it):\n%s", name, t.Name(), diff)
	}
}

// krew is krew and its manifest validator, validate-krew-manifest, at
// the version whose types write the manifest.
type krew struct{ bin, validator string }

// buildKrew returns krew, built from the Go module proxy on first use
// into the user cache directory, where later runs find it. A file lock
// keeps test processes from building it at once, and a build appears
// there whole or not at all.
func buildKrew(t *testing.T) krew {
	t.Helper()
	version := krewVersion(t)
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "kfsm", "krew", version)
	k := krew{bin: filepath.Join(dir, "krew"), validator: filepath.Join(dir, "validate-krew-manifest")}
	built := func() bool {
		_, err := os.Stat(dir)
		return err == nil
	}
	if built() {
		return k
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	defer lockFile(t, dir+".lock")()
	if built() {
		return k
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), version+".building-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.CommandContext(t.Context(), "go", "install", "sigs.k8s.io/krew/cmd/krew@"+version, "sigs.k8s.io/krew/cmd/validate-krew-manifest@"+version)
	cmd.Dir = tmp
	// Outside any module, as krew's go.mod alone says.
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install of krew %s: %v\n%s", version, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("built krew %s into %s", version, dir)
	return k
}

// krewVersion is the version of krew whose types this test binary has.
func krewVersion(t *testing.T) string {
	t.Helper()
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "sigs.k8s.io/krew" {
				return d.Version
			}
		}
	}
	t.Fatal("the test binary does not record which krew it has")
	return ""
}

// lockFile takes an exclusive lock on the file name, waiting while
// another process holds it, and returns its release. (kfsm's own file
// lock is in its root module, which this module does not require.)
func lockFile(t *testing.T, name string) func() {
	t.Helper()
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatalf("locking %s: %v", name, err)
	}
	return func() { _ = f.Close() }
}

// validate runs validate-krew-manifest on the manifest, without its
// install, which downloads the archives from their URLs: install does
// that with the archives on disk.
func (k krew) validate(t *testing.T, manifest string) error {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), k.validator, "-manifest", manifest, "-skip-install").CombinedOutput()
	if err != nil {
		// klog.Fatal follows the reason with every goroutine's stack.
		reason, _, _ := strings.Cut(string(out), "\ngoroutine ")
		t.Logf("validate-krew-manifest -manifest %s: %v\n%s", filepath.Base(manifest), err, reason)
	}
	return err
}

// install runs krew install with the manifest and the archive, as krew
// on the platform does, into a krew root of its own, which it returns.
func (k krew) install(t *testing.T, manifest, archive string, on platform) (string, error) {
	t.Helper()
	root := t.TempDir()
	cmd := exec.CommandContext(t.Context(), k.bin, "install", "--manifest="+manifest, "--archive="+archive)
	cmd.Env = append(os.Environ(), "KREW_ROOT="+root, "KREW_OS="+on.os, "KREW_ARCH="+on.arch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("krew install --manifest=%s --archive=%s for %s: %v\n%s", filepath.Base(manifest), filepath.Base(archive), on, err, out)
	}
	return root, err
}

// readManifest reads krew's manifest at name, refusing a field that
// krew's types do not have.
func readManifest(t *testing.T, name string) index.Plugin {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var m index.Plugin
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, data)
	}
	return m
}

// writeManifest writes the manifest at name, as make release does.
func writeManifest(t *testing.T, name string, m index.Plugin) {
	t.Helper()
	data, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
