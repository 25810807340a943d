package k8smod

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kfsm/kfsm/cluster/internal/assets"
	"github.com/kfsm/kfsm/cluster/internal/setupenvtest/releasetest"
)

// The tests put a tiny module in place of Kubernetes, whose binaries
// build in seconds and print "built", and serve setup-envtest's index and
// archive, of stand-ins that print "Kubernetes v1.36.3", from a local
// server. They never reach the internet.

const testVersion = "v1.36.3"

func tinyModule() assets.Source {
	files := map[string][]byte{"go.mod": []byte("module example.com/k8s\n\ngo 1.26\n")}
	for _, name := range append(coreGroup.Binaries, "kube-controller-manager", "kube-scheduler", "kwok") {
		files[name+"/main.go"] = []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"built\") }\n")
	}
	return assets.Source{Name: "k8s", Version: testVersion, Files: files}
}

// index serves setup-envtest's index and archive, and counts requests.
type index struct {
	url      string
	requests atomic.Int32
}

// serveIndex serves an index whose archive holds files; with fail, every
// request fails.
func serveIndex(t *testing.T, files map[string]string, fail bool) *index {
	t.Helper()
	archive := releasetest.Archive(t, files)
	idx := &index{}
	var base string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idx.requests.Add(1)
		switch {
		case fail:
			http.Error(w, "no", http.StatusInternalServerError)
		case r.URL.Path == "/index.yaml":
			_, _ = w.Write(releasetest.Index(testVersion, base+"/archive.tar.gz", archive))
		case r.URL.Path == "/archive.tar.gz":
			_, _ = w.Write(archive)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	base = srv.URL
	idx.url = srv.URL + "/index.yaml"
	return idx
}

func testFinder(t *testing.T, indexURL string, progress *bytes.Buffer) *finder {
	t.Helper()
	t.Setenv("KUBEBUILDER_ASSETS", "")
	f, err := newFinder(Options{Progress: progress, CacheDir: t.TempDir(), EnvtestStore: t.TempDir(), IndexURL: indexURL})
	if err != nil {
		t.Fatal(err)
	}
	f.src = tinyModule()
	f.core = assets.Group{Name: "core", Packages: []string{"./kube-apiserver", "./etcd", "./kubectl"}, Binaries: coreGroup.Binaries}
	f.workloads = assets.Group{Name: "workloads", Packages: []string{"./kube-controller-manager", "./kube-scheduler", "./kwok"}, Binaries: []string{"kube-controller-manager", "kube-scheduler", "kwok"}}
	return f
}

func writeStandIns(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, script := range releasetest.StandIns(testVersion) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// says checks that the lines of out begin, in order, with want.
func says(t *testing.T, out string, want ...string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	i := 0
	for _, w := range want {
		for i < len(lines) && !strings.HasPrefix(lines[i], w) {
			i++
		}
		if i == len(lines) {
			t.Errorf("no line, after those before, begins with %q:\n%s", w, out)
			return
		}
		i++
	}
}

// runs returns what the binary name in dir prints.
func runs(t *testing.T, dir, name string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(dir, name), "--version").Output()
	if err != nil {
		t.Fatalf("running %s in %s: %v", name, dir, err)
	}
	return strings.TrimSpace(string(out))
}

func TestEnsureTakesKubebuilderAssetsFirst(t *testing.T) {
	idx := serveIndex(t, releasetest.StandIns(testVersion), false)
	var progress bytes.Buffer
	f := testFinder(t, idx.url, &progress)
	writeStandIns(t, f.store.Path(testVersion))
	assetsDir := t.TempDir()
	writeStandIns(t, assetsDir)
	t.Setenv("KUBEBUILDER_ASSETS", assetsDir)

	dir, _, err := f.ensure(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if dir != assetsDir {
		t.Errorf("dir = %s, want KUBEBUILDER_ASSETS's %s", dir, assetsDir)
	}
	says(t, progress.String(), "kfsm: using kube-apiserver, etcd and kubectl from KUBEBUILDER_ASSETS="+assetsDir)
	if n := idx.requests.Load(); n > 0 {
		t.Errorf("%d requests to the index, want none", n)
	}
}

func TestEnsureTakesSetupEnvtestsStoreBeforeABuildOrADownload(t *testing.T) {
	idx := serveIndex(t, releasetest.StandIns(testVersion), false)
	var progress bytes.Buffer
	f := testFinder(t, idx.url, &progress)
	if _, err := f.cache.Ensure(t.Context(), f.src, f.core); err != nil {
		t.Fatal(err)
	}
	// KUBEBUILDER_ASSETS without binaries is passed over, and said so.
	empty := t.TempDir()
	t.Setenv("KUBEBUILDER_ASSETS", empty)
	store := f.store.Path(testVersion)
	writeStandIns(t, store)
	progress.Reset()

	dir, _, err := f.ensure(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if dir != store {
		t.Errorf("dir = %s, want setup-envtest's %s", dir, store)
	}
	says(t, progress.String(),
		"kfsm: ignoring KUBEBUILDER_ASSETS="+empty+": no executable kube-apiserver there",
		"kfsm: using kube-apiserver, etcd and kubectl v1.36.3 from setup-envtest's store, in "+store)
	if n := idx.requests.Load(); n > 0 {
		t.Errorf("%d requests to the index, want none", n)
	}
}

func TestEnsureTakesABuildBeforeADownload(t *testing.T) {
	idx := serveIndex(t, releasetest.StandIns(testVersion), false)
	var progress bytes.Buffer
	f := testFinder(t, idx.url, &progress)
	built, err := f.cache.Ensure(t.Context(), f.src, f.core)
	if err != nil {
		t.Fatal(err)
	}
	progress.Reset()

	dir, _, err := f.ensure(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if dir != built.Dir {
		t.Errorf("dir = %s, want the build's %s", dir, built.Dir)
	}
	says(t, progress.String(), "kfsm: using kube-apiserver, etcd and kubectl v1.36.3, built before, in "+built.Dir)
	if n := idx.requests.Load(); n > 0 {
		t.Errorf("%d requests to the index, want none", n)
	}
}

func TestEnsureDownloadsIntoSetupEnvtestsStore(t *testing.T) {
	idx := serveIndex(t, releasetest.StandIns(testVersion), false)
	var progress bytes.Buffer
	f := testFinder(t, idx.url, &progress)
	store := f.store.Path(testVersion)

	dir, _, err := f.ensure(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	if dir != store {
		t.Errorf("dir = %s, want setup-envtest's %s", dir, store)
	}
	if got := runs(t, dir, "kube-apiserver"); got != "Kubernetes v1.36.3" {
		t.Errorf("the downloaded kube-apiserver printed %q, want the stand-in's version", got)
	}
	says(t, progress.String(),
		"kfsm: downloading kube-apiserver, etcd and kubectl v1.36.3 from "+strings.TrimSuffix(idx.url, "index.yaml")+"archive.tar.gz into setup-envtest's store, "+store,
		"kfsm: downloaded kube-apiserver, etcd and kubectl in ")
	if strings.Contains(progress.String(), "packages to compile") {
		t.Errorf("a download that worked was followed by a build:\n%s", progress.String())
	}
	if n := idx.requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2: the index and the archive", n)
	}

	// The next time, the store has them.
	progress.Reset()
	if dir, _, err := f.ensure(t.Context(), false); err != nil || dir != store {
		t.Fatalf("ensure() again = %s, %v; want %s", dir, err, store)
	}
	says(t, progress.String(), "kfsm: using kube-apiserver, etcd and kubectl v1.36.3 from setup-envtest's store, in "+store)
	if n := idx.requests.Load(); n != 2 {
		t.Errorf("%d requests in all, want no more than the first download's 2", n)
	}
}

func TestEnsureBuildsWhenTheDownloadFails(t *testing.T) {
	unreachable := httptest.NewServer(http.NotFoundHandler())
	unreachable.Close()
	withoutKubectl := releasetest.StandIns(testVersion)
	delete(withoutKubectl, "kubectl")
	cases := map[string]struct {
		reason   string
		indexURL func(t *testing.T) string
		want     string // in the line that says why
	}{
		"NoNetwork": {
			reason:   "A machine that reaches only the Go module proxy fails at once, and builds.",
			indexURL: func(*testing.T) string { return unreachable.URL + "/index.yaml" },
			want:     "connection refused",
		},
		"ServerError": {
			reason:   "An index that cannot be read is a failed download.",
			indexURL: func(t *testing.T) string { return serveIndex(t, releasetest.StandIns(testVersion), true).url },
			want:     "500 Internal Server Error",
		},
		"IncompleteArchive": {
			reason:   "An archive without the three binaries is not used.",
			indexURL: func(t *testing.T) string { return serveIndex(t, withoutKubectl, false).url },
			want:     "the archive has no executable kubectl",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var progress bytes.Buffer
			f := testFinder(t, tc.indexURL(t), &progress)

			dir, _, err := f.ensure(t.Context(), false)
			if err != nil {
				t.Fatal(err)
			}
			if want := f.cache.Dir(f.src); dir != want {
				t.Errorf("%s\ndir = %s, want the build's %s", tc.reason, dir, want)
			}
			if got := runs(t, dir, "kube-apiserver"); got != "built" {
				t.Errorf("kube-apiserver printed %q, want the build's", got)
			}
			says(t, progress.String(),
				"kfsm: cannot download kube-apiserver, etcd and kubectl v1.36.3 (",
				"kfsm: building kube-apiserver, etcd, kubectl from k8s v1.36.3 into "+dir,
				"kfsm: core binaries ready: ")
			for _, l := range strings.Split(progress.String(), "\n") {
				if strings.HasPrefix(l, "kfsm: cannot download") && (!strings.Contains(l, tc.want) || !strings.HasSuffix(l, "; building them from the Go module proxy")) {
					t.Errorf("%s\nthe line that says why lacks %q, or the choice of a build:\n%s", tc.reason, tc.want, l)
				}
			}
			if _, err := os.Stat(f.store.Path(testVersion)); !os.IsNotExist(err) {
				t.Errorf("a failed download left %s: %v", f.store.Path(testVersion), err)
			}
		})
	}
}

func TestEnsureDownloadsTheCoreAndBuildsTheWorkloads(t *testing.T) {
	idx := serveIndex(t, releasetest.StandIns(testVersion), false)
	var progress bytes.Buffer
	f := testFinder(t, idx.url, &progress)

	dir, workloadsDir, err := f.ensure(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	if dir != f.store.Path(testVersion) || workloadsDir != f.cache.Dir(f.src) {
		t.Errorf("ensure() = %s, %s; want the store's %s and the build's %s", dir, workloadsDir, f.store.Path(testVersion), f.cache.Dir(f.src))
	}
	if got := runs(t, workloadsDir, "kube-scheduler"); got != "built" {
		t.Errorf("kube-scheduler printed %q, want the build's", got)
	}
	says(t, progress.String(),
		"kfsm: downloading kube-apiserver, etcd and kubectl v1.36.3 from ",
		"kfsm: building kube-controller-manager, kube-scheduler and kwok v1.36.3 from the Go module proxy: setup-envtest has no release of them",
		"kfsm: workloads binaries ready: ")

	progress.Reset()
	if _, again, err := f.ensure(t.Context(), true); err != nil || again != workloadsDir {
		t.Fatalf("ensure() again = %s, %v; want %s", again, err, workloadsDir)
	}
	says(t, progress.String(), "kfsm: using kube-controller-manager, kube-scheduler and kwok v1.36.3, built before, in "+workloadsDir)
}
