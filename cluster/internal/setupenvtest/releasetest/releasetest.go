// Package releasetest makes setup-envtest's release index and archives
// for tests, with stand-ins for the binaries, to serve from a local
// HTTP server.
package releasetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"
)

// StandIns are shell scripts named as the binaries of a release archive,
// kube-apiserver, etcd and kubectl, that print "Kubernetes <version>"
// whatever their arguments, as kube-apiserver --version does.
func StandIns(version string) map[string]string {
	script := "#!/bin/sh\necho Kubernetes " + version + "\n"
	return map[string]string{"kube-apiserver": script, "etcd": script, "kubectl": script}
}

// Archive returns a .tar.gz of files, by name, under the folder that the
// release archives use, each executable.
func Archive(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		h := &tar.Header{Name: "controller-tools/envtest/" + name, Mode: 0o755, Size: int64(len(files[name])), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[name])); err != nil {
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

// Index returns an index whose release version has, for this platform,
// the archive at link with data's SHA-512, and for another platform one
// that no test should fetch.
func Index(version, link string, data []byte) []byte {
	sum := sha512.Sum512(data)
	return fmt.Appendf(nil, `releases:
  %[1]s:
    envtest-%[1]s-%[2]s-%[3]s.tar.gz:
      hash: %[4]s
      selfLink: %[5]s
    envtest-%[1]s-plan9-mips.tar.gz:
      hash: %[4]s
      selfLink: %[5]s.plan9
`, version, runtime.GOOS, runtime.GOARCH, hex.EncodeToString(sum[:]), link)
}
