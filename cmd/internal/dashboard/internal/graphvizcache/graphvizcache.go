// Package graphvizcache keeps the native code that go-graphviz compiles
// Graphviz's WebAssembly into in a directory of the user's own, not in
// the temporary directory that the machine's users share.
//
// go-graphviz compiles its WebAssembly when its package is initialised,
// before main, and caches the result in os.TempDir()/go-graphviz, which
// any user of the machine may create first in a shared /tmp and fill
// with code that the process would then run. It reads no setting but
// TMPDIR, so this package sets TMPDIR, for the time of go-graphviz's
// initialisation, to kfsm/graphviz in the user cache directory, which it
// makes 0700 and checks to be the user's and writable by no one else,
// nor any directory above it but by root or, with the sticky bit, as
// /tmp is. Where that directory cannot be had, TMPDIR is os.DevNull, in
// which go-graphviz can make no directory, and it keeps the code in
// memory. Restore, called by the package that imports go-graphviz, sets
// TMPDIR back.
//
// # Assumptions
//
// This package is initialised before go-graphviz. Go initialises a
// package after those it imports and otherwise in the order of their
// import paths (the specification's "Package initialization"): this
// package imports nothing that wazero, which go-graphviz imports, does
// not import too, and its path sorts before wazero's, so it is
// initialised before wazero and so before go-graphviz. The dashboard's
// tests run a process with a TMPDIR that others may write, and check that
// nothing is written there.
//
// # Caveats
//
// Between this package's initialisation and Restore, the packages that Go
// initialises see TMPDIR set to the cache directory. Elsewhere than on
// Unix this package changes nothing: on Windows, os.TempDir is the
// user's own.
package graphvizcache

import "os"

// before is TMPDIR as the process started, if this package changed it,
// and why the user cache was refused, if it was.
var before struct {
	changed bool
	tmpdir  string
	set     bool
	refused error
}

// Restore sets TMPDIR back to what it was when the process started. It
// returns why go-graphviz keeps its compiled code in memory only, or nil
// if it keeps it in the user's cache or where it always did.
func Restore() error {
	switch {
	case !before.changed:
	case before.set:
		_ = os.Setenv("TMPDIR", before.tmpdir)
	default:
		_ = os.Unsetenv("TMPDIR")
	}
	before.changed = false
	return before.refused
}
