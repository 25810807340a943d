package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
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
