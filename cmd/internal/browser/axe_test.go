package browser

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// tarball is an npm package's tarball holding files.
func tarball(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func integrityOf(data []byte) string {
	sum := sha512.Sum512(data)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

// axe-core's script is taken from a tarball whose integrity is the pinned
// one, and from the cache after; a tarball of another integrity, or one
// without the script, leaves nothing in the cache.
func TestAxeCacheChecksTheTarball(t *testing.T) {
	const script = "window.axe = {};"
	good := tarball(t, map[string]string{"package/package.json": "{}", "package/axe.min.js": script})
	cases := map[string]struct {
		reason    string
		served    []byte
		integrity string
		wantErr   string
	}{
		"PinnedIntegrity": {
			reason: "the script of a tarball with the pinned integrity is cached", served: good, integrity: integrityOf(good),
		},
		"OtherIntegrity": {
			reason: "a tarball that is not the one pinned is refused", served: good, integrity: integrityOf([]byte("another")),
			wantErr: "not the one the registry published",
		},
		"NoScript": {
			reason: "a tarball without axe.min.js is refused", served: tarball(t, map[string]string{"package/axe.js": script}),
			wantErr: "holds no package/axe.min.js",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				_, _ = w.Write(tc.served)
			}))
			defer srv.Close()
			if tc.integrity == "" {
				tc.integrity = integrityOf(tc.served)
			}
			c := &axeCache{dir: filepath.Join(t.TempDir(), "axe"), url: srv.URL, integrity: tc.integrity, progress: testWriter{t}, client: srv.Client()}
			got, err := c.ensure(t.Context())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("%s: ensure returned %v, want an error that says %q", tc.reason, err, tc.wantErr)
				}
				if _, err := os.Stat(filepath.Join(c.dir, axeScript)); err == nil {
					t.Errorf("%s: the refused script is in the cache", tc.reason)
				}
				return
			}
			if err != nil || got != script {
				t.Fatalf("%s: ensure returned %q, %v, want the script", tc.reason, got, err)
			}
			if again, err := c.ensure(t.Context()); err != nil || again != script || requests.Load() != 1 {
				t.Errorf("%s: the second ensure returned %q, %v after %d requests, want the script from the cache", tc.reason, again, err, requests.Load())
			}
		})
	}
}
