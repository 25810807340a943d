package leancache

import (
	"hash/maphash"
	"maps"
	"sync"
	"unsafe"
)

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

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{strings: map[string]string{}}
}

// Share returns the table's copy of s, keeping s as that copy if the
// table has none and room for it.
func (t *Table) Share(s string) string {
	c, _ := t.Copy(s)
	return c
}

// Copy returns the table's copy of s, as Share does, and whether it is
// another string than s: whether a field that holds s should be set to
// it. A field that holds the copy already is then left as it is, which
// leaves a map that other objects share unchanged.
func (t *Table) Copy(s string) (string, bool) {
	if s == "" {
		return s, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.strings[s]; ok {
		return c, unsafe.StringData(c) != unsafe.StringData(s)
	}
	if len(t.strings) < max {
		t.strings[s] = s
	}
	return s, false
}

// siblingSlots bounds the owners whose label maps a Siblings remembers.
// The children of one parent are written together, so their events, and
// the maps to share, come close together.
const siblingSlots = 256

// Siblings shares equal label maps between objects of one owner: the
// children of one parent usually carry the same labels, and a cache then
// holds one map of them, not one per child. It remembers the last map
// shared of each of a bounded number of owners. Its methods may be called
// at once from several goroutines.
type Siblings struct {
	mu    sync.Mutex
	seed  maphash.Seed
	slots [siblingSlots]sibling
}

type sibling struct {
	owner  string
	labels map[string]string
}

// NewSiblings returns a Siblings that remembers no map yet.
func NewSiblings() *Siblings {
	return &Siblings{seed: maphash.MakeSeed()}
}

// Find returns the map that Keep last kept for owner if it equals labels,
// those of an object of owner, and nil otherwise.
func (s *Siblings) Find(owner string, labels map[string]string) map[string]string {
	if owner == "" {
		return nil
	}
	i := maphash.String(s.seed, owner) % siblingSlots
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl := s.slots[i]; sl.owner == owner && maps.Equal(sl.labels, labels) {
		return sl.labels
	}
	return nil
}

// Keep keeps labels as the map that Find returns for owner's objects.
// The map must not be changed after, as no object in a cache may be.
func (s *Siblings) Keep(owner string, labels map[string]string) {
	if owner == "" {
		return
	}
	i := maphash.String(s.seed, owner) % siblingSlots
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots[i] = sibling{owner: owner, labels: labels}
}
