package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/krew/pkg/index"
)

// kitPlugin is the kit's app as a kubectl plugin, built for this machine's
// platform alone: make test does not wait for the other platforms'
// standard libraries to compile (make release-test builds kfsm's five).
func kitPlugin() *plugin {
	return &plugin{
		module: "app", pkg: ".", binary: "kubectl-kit", name: "kit",
		homepage: "https://kit.example.com", shortDescription: "See the kit", description: "The kit, as a kubectl plugin.\n",
		platforms:   []platform{{runtime.GOOS, runtime.GOARCH}},
		downloadURL: "https://kit.example.com/releases/{version}",
	}
}

// An entry is a file of an archive.
type entry struct {
	Mode    int64
	Content string
}

// readArchive returns the files of the gzipped tar at name, by name.
func readArchive(t *testing.T, name string) map[string]entry {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]entry{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = entry{Mode: h.Mode, Content: string(data)}
	}
}

func sha256File(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// make release builds the plugin of the release commit into dist/: an
// archive with the binary, which records the release's version, and the
// LICENSE; SHA256SUMS; and krew's manifest, which names the archive by its
// URL and its SHA-256. The tree stays clean.
func TestReleaseBuildsThePluginForKrew(t *testing.T) {
	repo := kit(t)
	r, _ := newRelease(repo, "v0.1.0", "HEAD")
	r.plugin = kitPlugin()
	if err := r.run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if status := gitT(t, repo, "status", "--porcelain"); status != "" {
		t.Errorf("the release left changes behind:\n%s", status)
	}
	dist := filepath.Join(repo, "dist")
	on := platform{runtime.GOOS, runtime.GOARCH}
	name := "kubectl-kit_v0.1.0_" + on.os + "_" + on.arch + ".tar.gz"
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, e := range entries {
		listed = append(listed, e.Name())
	}
	if diff := cmp.Diff([]string{"SHA256SUMS", "kit.yaml", name}, listed); diff != "" {
		t.Errorf("dist/ (-want +got):\n%s", diff)
	}
	sum := sha256File(t, filepath.Join(dist, name))
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if want := sum + "  " + name + "\n"; string(sums) != want {
		t.Errorf("SHA256SUMS is\n%s\nwant\n%s", sums, want)
	}

	m := readManifest(t, filepath.Join(dist, "kit.yaml"))
	bin := kitPlugin().executable(on)
	want := index.Platform{
		URI: "https://kit.example.com/releases/v0.1.0/" + name, Sha256: sum, Bin: bin,
		Files: []index.FileOperation{{From: bin, To: "."}, {From: "LICENSE", To: "."}},
	}
	if m.Name != "kit" || m.Spec.Version != "v0.1.0" || len(m.Spec.Platforms) != 1 {
		t.Fatalf("kit.yaml names %q at %q with %d platforms, want kit at v0.1.0 with 1", m.Name, m.Spec.Version, len(m.Spec.Platforms))
	}
	got := m.Spec.Platforms[0]
	if diff := cmp.Diff(map[string]string{"os": on.os, "arch": on.arch}, got.Selector.MatchLabels); diff != "" {
		t.Errorf("the platform's selector (-want +got):\n%s", diff)
	}
	got.Selector = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kit.yaml's platform (-want +got):\n%s", diff)
	}

	files := readArchive(t, filepath.Join(dist, name))
	if lic := files["LICENSE"]; lic != (entry{Mode: 0o644, Content: "The kit's license.\n"}) || files[bin].Mode != 0o755 || len(files) != 2 {
		t.Fatalf("the archive holds %d files, want %s (mode 0755) and LICENSE (0644, the repository's): LICENSE is %+v, %s's mode %o", len(files), bin, lic, bin, files[bin].Mode)
	}
	if strings.Contains(files[bin].Content, repo) {
		t.Errorf("the archive's %s holds the path of the repository it was built in, %s", bin, repo)
	}
	run := filepath.Join(t.TempDir(), bin)
	if err := os.WriteFile(run, []byte(files[bin].Content), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), run).CombinedOutput(); err != nil || string(out) != "kit kit\n" {
		t.Errorf("the archive's %s printed %q (%v), want the kit's app's \"kit kit\"", bin, out, err)
	}
	if err := builtAt(run, "example.com/kit", "v0.1.0", on); err != nil {
		t.Error(err)
	}
}

// An archive depends on its files alone, so that building a release
// again makes the archives whose sums krew's manifest holds.
func TestReleaseArchiveIsTheSameEachTime(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "bin", "a binary")
	write(t, dir, "LICENSE", "a license")
	files := []archiveFile{{name: "bin", path: filepath.Join(dir, "bin"), mode: 0o755}, {name: "LICENSE", path: filepath.Join(dir, "LICENSE"), mode: 0o644}}
	var sums []string
	for _, name := range []string{"a.tar.gz", "b.tar.gz"} {
		sum, err := writeArchive(filepath.Join(dir, name), time.Unix(1700000000, 0), files)
		if err != nil {
			t.Fatal(err)
		}
		if file := sha256File(t, filepath.Join(dir, name)); file != sum {
			t.Errorf("writeArchive returned %s, but %s's SHA-256 is %s", sum, name, file)
		}
		sums = append(sums, sum)
	}
	if sums[0] != sums[1] {
		t.Errorf("the same files made archives %s and %s", sums[0], sums[1])
	}
}

// A plugin that cannot be built or published stops the release before
// its commit, with the other problems of the tree.
func TestReleaseRefusesAPluginItCannotShip(t *testing.T) {
	for name, tc := range map[string]struct {
		reason string
		change func(t *testing.T, repo string, p *plugin)
		want   string
	}{
		"DistNotIgnored": {
			reason: "The archives go to dist/, which would leave the tree unclean.",
			change: func(t *testing.T, repo string, _ *plugin) {
				write(t, repo, ".gitignore", "bin/\n")
				commit(t, repo, "dist/ not ignored")
			},
			want: "dist/ is not ignored by git",
		},
		"NoPackage": {
			reason: "The plugin's main package is in its module.",
			change: func(_ *testing.T, _ string, p *plugin) { p.pkg = "./kubectl-kit" },
			want:   "the plugin's package ./kubectl-kit is not a directory of module \"app\"",
		},
		"NotAModule": {
			reason: "The plugin is built from a released module.",
			change: func(_ *testing.T, _ string, p *plugin) { p.module = "tools" },
			want:   `the plugin's module, in "tools", is not a module of go.work`,
		},
		"NoLicense": {
			reason: "Each archive holds the LICENSE, which krew's index asks for.",
			change: func(t *testing.T, repo string, _ *plugin) {
				gitT(t, repo, "rm", "--quiet", "LICENSE")
				commit(t, repo, "no license")
			},
			want: "the repository has no LICENSE",
		},
		"DownloadURLNotHTTP": {
			reason: "krew downloads the archives over HTTP.",
			change: func(_ *testing.T, _ string, p *plugin) { p.downloadURL = "/releases/{version}" },
			want:   "is not an http or https URL",
		},
	} {
		t.Run(name, func(t *testing.T) {
			repo := kit(t)
			r, runs := newRelease(repo, "v0.1.0", "")
			r.plugin = kitPlugin()
			tc.change(t, repo, r.plugin)
			r.tested = gitT(t, repo, "rev-parse", "HEAD")
			before := gitT(t, repo, "rev-parse", "HEAD")
			err := r.run(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s\nrelease returned %v, want an error that says %q", tc.reason, err, tc.want)
			}
			if after := gitT(t, repo, "rev-parse", "HEAD"); after != before || *runs != 0 || gitT(t, repo, "tag", "--list") != "" {
				t.Errorf("%s\nthe refused release went on: HEAD %s, was %s; tests run %d times; tags %q", tc.reason, after, before, *runs, gitT(t, repo, "tag", "--list"))
			}
			if _, err := os.Stat(filepath.Join(repo, "dist")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s\nthe refused release made dist/ (%v)", tc.reason, err)
			}
		})
	}
}
