//go:build unix

package graphvizcache

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// The tests link no go-graphviz; they set TMPDIR back, as the package
// that imports it does, so that their temporary directories are where
// the user keeps them.
func TestMain(m *testing.M) {
	_ = Restore()
	os.Exit(m.Run())
}

// A directory is private when the user owns it and no one else may write
// it, nor rename it by writing a directory above it.
func TestPrivate(t *testing.T) {
	me := os.Geteuid()
	type layout struct {
		parent, dir fs.FileMode
		// link makes the directory checked a symbolic link to it.
		link bool
	}
	cases := map[string]struct {
		reason  string
		layout  layout
		uid     int
		wantErr bool
	}{
		"Private": {
			reason: "A directory of mode 0700 in one of the user's is private.",
			layout: layout{parent: 0o700, dir: 0o700},
			uid:    me,
		},
		"ReadableByOthers": {
			reason: "Others may read the compiled code; they may not change it.",
			layout: layout{parent: 0o755, dir: 0o755},
			uid:    me,
		},
		"WritableByGroup": {
			reason:  "A directory that the group may write is not private.",
			layout:  layout{parent: 0o700, dir: 0o770},
			uid:     me,
			wantErr: true,
		},
		"WritableByAll": {
			reason:  "A directory that all may write is not private.",
			layout:  layout{parent: 0o700, dir: 0o777},
			uid:     me,
			wantErr: true,
		},
		"SomeoneElses": {
			reason:  "A directory that another user owns is not private.",
			layout:  layout{parent: 0o700, dir: 0o700},
			uid:     me + 1,
			wantErr: true,
		},
		"InADirectoryWritableByAll": {
			reason:  "Whoever may write the directory above may rename the directory and put one of theirs in its place.",
			layout:  layout{parent: 0o777, dir: 0o700},
			uid:     me,
			wantErr: true,
		},
		"InAStickyDirectory": {
			reason: "In a directory with the sticky bit, as /tmp, only the owner renames an entry.",
			layout: layout{parent: 0o777 | fs.ModeSticky, dir: 0o700},
			uid:    me,
		},
		"ThroughASymbolicLink": {
			reason: "A symbolic link is followed, and the directory it leads to checked.",
			layout: layout{parent: 0o700, dir: 0o700, link: true},
			uid:    me,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "parent")
			dir := filepath.Join(parent, "graphviz")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(parent, 0o700) })
			for d, mode := range map[string]fs.FileMode{dir: tc.layout.dir, parent: tc.layout.parent} {
				if err := os.Chmod(d, mode); err != nil {
					t.Fatal(err)
				}
			}
			want, err := filepath.EvalSymlinks(dir)
			if err != nil {
				t.Fatal(err)
			}
			checked := dir
			if tc.layout.link {
				checked = filepath.Join(t.TempDir(), "link")
				if err := os.Symlink(dir, checked); err != nil {
					t.Fatal(err)
				}
			}
			got, err := private(checked, tc.uid)
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s\nprivate(%s): %v, want an error: %t", tc.reason, checked, err, tc.wantErr)
			}
			if err == nil && got != want {
				t.Errorf("%s\nprivate(%s) = %s, want %s", tc.reason, checked, got, want)
			}
		})
	}
}

// A file is not a directory.
func TestPrivateRefusesAFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "graphviz")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := private(f, os.Geteuid()); err == nil {
		t.Errorf("private(%s) = nil error for a file", f)
	}
}
