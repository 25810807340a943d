package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	gomodule "golang.org/x/mod/module"
)

// writeProxy writes into dir a module proxy that serves each module at
// version, made from its tag in the repository, in the layout that
// GOPROXY=file://dir reads: for each module, @v/list, and the version's
// .info, .mod and .zip.
func writeProxy(t *testing.T, dir, repo string, mods []module, version string) {
	t.Helper()
	for _, m := range mods {
		tag := m.tag(version)
		path, err := gomodule.EscapePath(m.path)
		if err != nil {
			t.Fatal(err)
		}
		file, err := gomodule.EscapeVersion(version)
		if err != nil {
			t.Fatal(err)
		}
		var zip bytes.Buffer
		if err := moduleZip(&zip, repo, tag, m, version); err != nil {
			t.Fatal(err)
		}
		mod, err := goMod(repo, tag, m)
		if err != nil {
			t.Fatal(err)
		}
		when, err := git(repo, "log", "-1", "--format=%cI", tag)
		if err != nil {
			t.Fatal(err)
		}
		info, err := json.Marshal(struct{ Version, Time string }{version, when})
		if err != nil {
			t.Fatal(err)
		}
		at := filepath.Join(dir, filepath.FromSlash(path), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{
			"list": []byte(version + "\n"), file + ".info": info, file + ".mod": mod, file + ".zip": zip.Bytes(),
		} {
			if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
