package main

import (
	"bytes"
	"io"
	"os"

	gomodule "golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	modzip "golang.org/x/mod/zip"
)

// moduleZip writes the zip of module m at version from revision rev of
// the repository (a commit, a tag or a tree), as the go command makes it
// from a tag: the files that git archive has in the module's directory,
// without those of the modules nested in it, and the repository's
// LICENSE if the module has none.
func moduleZip(w io.Writer, repo, rev string, m module, version string) error {
	return modzip.CreateFromVCS(w, gomodule.Version{Path: m.path, Version: version}, repo, rev, m.dir)
}

// goMod is the module's go.mod at revision rev.
func goMod(repo, rev string, m module) ([]byte, error) {
	return gitOutput(repo, "cat-file", "blob", rev+":"+m.file("go.mod"))
}

// sums are what go.sum records of a module version: the hash of its zip
// and the hash of its go.mod.
type sums struct{ zip, mod string }

// checksums computes the sums of module m at version, made from revision
// rev of the repository.
func checksums(repo, rev string, m module, version string) (sums, error) {
	f, err := os.CreateTemp("", "kfsm-module-*.zip")
	if err != nil {
		return sums{}, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	err = moduleZip(f, repo, rev, m, version)
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return sums{}, err
	}
	zipSum, err := dirhash.HashZip(f.Name(), dirhash.Hash1)
	if err != nil {
		return sums{}, err
	}
	data, err := goMod(repo, rev, m)
	if err != nil {
		return sums{}, err
	}
	modSum, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	return sums{zip: zipSum, mod: modSum}, err
}
