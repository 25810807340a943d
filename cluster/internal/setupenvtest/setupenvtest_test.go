package setupenvtest_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/cluster/internal/setupenvtest"
	"github.com/kfsm/kfsm/cluster/internal/setupenvtest/releasetest"
)

const version = "v1.36.3"

// serve serves index at /index.yaml and archive at /archive.tar.gz, and
// returns the index's address.
func serve(t *testing.T, index func(base string) []byte, archive []byte) string {
	t.Helper()
	var base string
	mux := http.NewServeMux()
	mux.HandleFunc("/index.yaml", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(index(base)) })
	mux.HandleFunc("/archive.tar.gz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(archive) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base = srv.URL
	return srv.URL + "/index.yaml"
}

// entries lists what dir holds.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

func TestInstallPutsTheArchivesBinariesInTheStore(t *testing.T) {
	files := releasetest.StandIns(version)
	data := releasetest.Archive(t, files)
	indexURL := serve(t, func(base string) []byte { return releasetest.Index(version, base+"/archive.tar.gz", data) }, data)

	a, err := setupenvtest.FindArchive(t.Context(), indexURL, version)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(indexURL, "index.yaml") + "archive.tar.gz"; a.URL != want || a.Version != version {
		t.Errorf("FindArchive() = %+v, want version %s at %s", a, version, want)
	}
	store := setupenvtest.Store{Dir: t.TempDir()}
	dir, err := store.Install(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	// setup-envtest's layout, so that it finds them too.
	if want := filepath.Join(store.Dir, "k8s", "1.36.3-"+runtime.GOOS+"-"+runtime.GOARCH); dir != want || store.Path(version) != want {
		t.Errorf("Install() = %s, Path() = %s, want %s", dir, store.Path(version), want)
	}
	got := map[string]string{}
	for _, name := range entries(t, dir) {
		content, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got[name] = string(content)
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s is not executable: %v", name, err)
		}
	}
	if diff := cmp.Diff(files, got); diff != "" {
		t.Errorf("installed files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{filepath.Base(dir)}, entries(t, filepath.Join(store.Dir, "k8s"))); diff != "" {
		t.Errorf("the store holds more than the version's folder (-want +got):\n%s", diff)
	}
}

func TestFindArchiveResolvesARelativeLink(t *testing.T) {
	data := releasetest.Archive(t, releasetest.StandIns(version))
	indexURL := serve(t, func(string) []byte { return releasetest.Index(version, "archive.tar.gz", data) }, data)
	a, err := setupenvtest.FindArchive(t.Context(), indexURL, version)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(indexURL, "index.yaml") + "archive.tar.gz"; a.URL != want {
		t.Errorf("URL = %s, want %s", a.URL, want)
	}
}

func TestFindArchiveRefusesAnIndexWithoutTheArchive(t *testing.T) {
	data := releasetest.Archive(t, releasetest.StandIns(version))
	platform := runtime.GOOS + "-" + runtime.GOARCH
	cases := map[string]struct {
		reason string
		index  func(base string) []byte
		want   []string // in the error
	}{
		"NoRelease": {
			reason: "An index without the version says so.",
			index:  func(base string) []byte { return releasetest.Index("v1.30.0", base+"/archive.tar.gz", data) },
			want:   []string{"has no release " + version},
		},
		"NoPlatform": {
			reason: "A release without this platform's archive says which archive it lacks.",
			index: func(base string) []byte {
				return []byte(strings.ReplaceAll(string(releasetest.Index(version, base+"/archive.tar.gz", data)), platform, "plan9-arm"))
			},
			want: []string{"has no envtest-" + version + "-" + platform + ".tar.gz in release " + version},
		},
		"NoHash": {
			reason: "An archive that cannot be checked is not downloaded.",
			index: func(base string) []byte {
				return fmt.Appendf(nil, "releases:\n  %s:\n    envtest-%s-%s.tar.gz:\n      selfLink: %s/archive.tar.gz\n", version, version, platform, base)
			},
			want: []string{"gives no SHA-512 of envtest-" + version},
		},
		"NotAnIndex": {
			reason: "A page that is not setup-envtest's index is refused.",
			index:  func(string) []byte { return []byte("<html><body>releases</body></html>") },
			want:   []string{"is not setup-envtest's"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			indexURL := serve(t, tc.index, data)
			_, err := setupenvtest.FindArchive(t.Context(), indexURL, version)
			if err == nil {
				t.Fatalf("%s FindArchive succeeded", tc.reason)
			}
			for _, want := range append(tc.want, indexURL) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s\nerror lacks %q: %v", tc.reason, want, err)
				}
			}
		})
	}
}

func TestFindArchiveSaysWhyTheIndexIsOutOfReach(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := setupenvtest.FindArchive(t.Context(), srv.URL+"/index.yaml", version)
	if err == nil || !strings.Contains(err.Error(), "GET "+srv.URL+"/index.yaml: 404 Not Found") {
		t.Errorf("FindArchive() error = %v, want the status of the index", err)
	}
	srv.Close()
	_, err = setupenvtest.FindArchive(t.Context(), srv.URL+"/index.yaml", version)
	if err == nil || !strings.Contains(err.Error(), srv.URL+"/index.yaml") {
		t.Errorf("FindArchive() error = %v, want one that names the index", err)
	}
}

func TestInstallRefusesABadArchiveAndLeavesNothing(t *testing.T) {
	standIns := releasetest.StandIns(version)
	withoutKubectl := maps.Clone(standIns)
	delete(withoutKubectl, "kubectl")
	cases := map[string]struct {
		reason  string
		listed  []byte // the archive whose digest the index gives
		served  []byte // the archive the server sends
		missing bool   // the server has no archive
		want    string // in the error
	}{
		"AlteredArchive": {
			reason: "An archive whose SHA-512 is not the index's is not installed.",
			listed: releasetest.Archive(t, standIns),
			served: releasetest.Archive(t, withoutKubectl),
			want:   "its SHA-512 is",
		},
		"TruncatedArchive": {
			reason: "A download cut short is not installed.",
			listed: releasetest.Archive(t, standIns),
			served: releasetest.Archive(t, standIns)[:100],
			want:   "its SHA-512 is",
		},
		"MissingArchive": {
			reason:  "An archive the server does not have is an error with its status.",
			listed:  releasetest.Archive(t, standIns),
			missing: true,
			want:    "404 Not Found",
		},
		"ArchiveWithoutABinary": {
			reason: "An archive must hold kube-apiserver, etcd and kubectl.",
			listed: releasetest.Archive(t, withoutKubectl),
			served: releasetest.Archive(t, withoutKubectl),
			want:   "the archive has no executable kubectl",
		},
		"ArchiveOutsideItsFolder": {
			reason: "A file named .. would be written beside the store's folders.",
			listed: releasetest.Archive(t, map[string]string{"..": "x"}),
			served: releasetest.Archive(t, map[string]string{"..": "x"}),
			want:   `holds a file named "controller-tools/envtest/.."`,
		},
		"NotAnArchive": {
			reason: "A file that is not a .tar.gz is refused.",
			listed: []byte("not gzip"),
			served: []byte("not gzip"),
			want:   "the archive is not a .tar.gz",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			mux := http.NewServeMux()
			if !tc.missing {
				mux.HandleFunc("/archive.tar.gz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(tc.served) })
			}
			var base string
			mux.HandleFunc("/index.yaml", func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write(releasetest.Index(version, base+"/archive.tar.gz", tc.listed))
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			base = srv.URL

			a, err := setupenvtest.FindArchive(t.Context(), srv.URL+"/index.yaml", version)
			if err != nil {
				t.Fatal(err)
			}
			store := setupenvtest.Store{Dir: t.TempDir()}
			_, err = store.Install(t.Context(), a)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s\nInstall() error = %v, want one with %q", tc.reason, err, tc.want)
			}
			if left := entries(t, filepath.Join(store.Dir, "k8s")); len(left) > 0 {
				t.Errorf("a refused archive left %v in the store", left)
			}
		})
	}
}

func TestInstallBesideAnotherInstall(t *testing.T) {
	data := releasetest.Archive(t, releasetest.StandIns(version))
	indexURL := serve(t, func(base string) []byte { return releasetest.Index(version, base+"/archive.tar.gz", data) }, data)
	a, err := setupenvtest.FindArchive(t.Context(), indexURL, version)
	if err != nil {
		t.Fatal(err)
	}

	// Another process installed the binaries while this one downloaded.
	store := setupenvtest.Store{Dir: t.TempDir()}
	if _, err := store.Install(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if dir, err := store.Install(t.Context(), a); err != nil || dir != store.Path(version) {
		t.Errorf("Install() over a complete install = %s, %v; want %s", dir, err, store.Path(version))
	}

	// A folder without the binaries, as an interrupted setup-envtest
	// leaves, is named in the error.
	store = setupenvtest.Store{Dir: t.TempDir()}
	if err := os.MkdirAll(store.Path(version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store.Path(version), "etcd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = store.Install(t.Context(), a)
	if err == nil || !strings.Contains(err.Error(), store.Path(version)+" already, without the binaries: remove it") {
		t.Errorf("Install() over a partial install: error = %v, want one that says to remove it", err)
	}
}

func TestDefaultStoreIsSetupEnvtests(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("LocalAppData", filepath.Join(home, "AppData"))
	want := map[string]string{
		"windows": filepath.Join(home, "AppData", "kubebuilder-envtest"),
		"darwin":  filepath.Join(home, "Library", "Application Support", "io.kubebuilder.envtest"),
	}[runtime.GOOS]
	if want == "" {
		want = filepath.Join(home, ".local", "share", "kubebuilder-envtest")
	}
	if got, err := setupenvtest.DefaultStore(); err != nil || got != want {
		t.Errorf("DefaultStore() = %s, %v; want %s", got, err, want)
	}
	if runtime.GOOS == "windows" || runtime.GOOS == "darwin" {
		return
	}
	data := filepath.Join(home, "data")
	t.Setenv("XDG_DATA_HOME", data)
	if got, err := setupenvtest.DefaultStore(); err != nil || got != filepath.Join(data, "kubebuilder-envtest") {
		t.Errorf("DefaultStore() with XDG_DATA_HOME = %s, %v; want it under %s", got, err, data)
	}
}
