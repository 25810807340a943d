package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"

	gomodule "golang.org/x/mod/module"
)

// writeProxy writes into dir a module proxy that serves each module at
// version, made from its tag in the repository, in the layout that
// GOPROXY=file://dir reads: for each module, @v/list, and the version's
// .info, .mod and .zip. The plugin is built from it. (The test of a
// user's install does not use it: the go command there finds the tags by
// its own rule, which this one's naming cannot stand in for.)
func writeProxy(dir, repo string, mods []module, version string) error {
	for _, m := range mods {
		tag := m.tag(version)
		path, err := gomodule.EscapePath(m.path)
		if err != nil {
			return err
		}
		file, err := gomodule.EscapeVersion(version)
		if err != nil {
			return err
		}
		var zip bytes.Buffer
		if err := moduleZip(&zip, repo, tag, m, version); err != nil {
			return err
		}
		mod, err := goMod(repo, tag, m)
		if err != nil {
			return err
		}
		when, err := git(repo, "log", "-1", "--format=%cI", tag)
		if err != nil {
			return err
		}
		info, err := json.Marshal(struct{ Version, Time string }{version, when})
		if err != nil {
			return err
		}
		at := filepath.Join(dir, filepath.FromSlash(path), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			return err
		}
		for name, data := range map[string][]byte{
			"list": []byte(version + "\n"), file + ".info": info, file + ".mod": mod, file + ".zip": zip.Bytes(),
		} {
			if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
