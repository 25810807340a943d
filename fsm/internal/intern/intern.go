// Package intern keeps one copy of each string that many objects repeat,
// so that a cache of them holds it once.
package intern

import "sync"

// max bounds the strings that a table keeps: the fields that share them
// take their values from small sets, and a string beyond the bound is
// kept as it came.
const max = 4096

// Table keeps one copy of each string shared through it. Its methods may
// be called at once from several goroutines.
type Table struct {
	mu      sync.Mutex
	strings map[string]string
}

// New returns an empty table.
func New() *Table {
	return &Table{strings: map[string]string{}}
}

// Share returns the table's copy of s, keeping s as that copy if the
// table has none and room for it.
func (t *Table) Share(s string) string {
	if s == "" {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.strings[s]; ok {
		return c
	}
	if len(t.strings) < max {
		t.strings[s] = s
	}
	return s
}
