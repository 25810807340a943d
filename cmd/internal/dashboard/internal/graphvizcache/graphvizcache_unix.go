//go:build unix

package graphvizcache

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

func init() {
	before.tmpdir, before.set = os.LookupEnv("TMPDIR")
	d, err := dir()
	if err != nil {
		before.refused = fmt.Errorf("go-graphviz's cache: %w", err)
		d = os.DevNull
	}
	before.changed = os.Setenv("TMPDIR", d) == nil
}

// dir is the user's cache directory for go-graphviz, made if need be and
// checked, with its symbolic links resolved.
func dir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	d := filepath.Join(base, "kfsm", "graphviz")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", err
	}
	return private(d, os.Geteuid())
}

// private returns d with its symbolic links resolved if d is a directory
// that uid owns and that no one else may write, and if every directory
// above it belongs to uid or root and may be written by no one else, or
// has the sticky bit, so that no one else can rename what it holds.
func private(d string, uid int) (string, error) {
	resolved, err := filepath.EvalSymlinks(d)
	if err != nil {
		return "", err
	}
	resolved, err = filepath.Abs(resolved)
	if err != nil {
		return "", err
	}
	for p := resolved; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !fi.IsDir() {
			return "", fmt.Errorf("%s is not a directory", p)
		}
		owner, perm := int(st.Uid), fi.Mode().Perm()
		switch {
		case p == resolved && owner != uid:
			return "", fmt.Errorf("%s belongs to uid %d, not %d", p, owner, uid)
		case p == resolved && perm&0o022 != 0:
			return "", fmt.Errorf("%s may be written by others (%v)", p, perm)
		case owner != uid && owner != 0:
			return "", fmt.Errorf("%s, above %s, belongs to uid %d", p, resolved, owner)
		case perm&0o022 != 0 && fi.Mode()&os.ModeSticky == 0:
			return "", fmt.Errorf("%s, above %s, may be written by others (%v)", p, resolved, perm)
		}
		if filepath.Dir(p) == p {
			return resolved, nil
		}
	}
}
