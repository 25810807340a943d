package leancache

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

func TestShareReturnsOneCopy(t *testing.T) {
	table := NewTable()
	first := strings.Clone("kfsm.io/machine")
	second := strings.Clone("kfsm.io/machine")
	if unsafe.StringData(first) == unsafe.StringData(second) {
		t.Fatal("the test's two strings share their bytes already")
	}
	if got := table.Share(first); unsafe.StringData(got) != unsafe.StringData(first) {
		t.Fatal("the first string shared is not the table's copy")
	}
	if got := table.Share(second); unsafe.StringData(got) != unsafe.StringData(first) {
		t.Fatal("an equal string did not come back as the table's copy")
	}
}

func TestShareIsBounded(t *testing.T) {
	table := NewTable()
	for i := range max + 10 {
		table.Share(fmt.Sprint("value-", i))
	}
	if len(table.strings) != max {
		t.Fatalf("the table keeps %d strings, want its bound %d", len(table.strings), max)
	}
	beyond := strings.Clone("beyond the bound")
	if got := table.Share(beyond); got != beyond {
		t.Fatalf("a string beyond the bound came back as %q", got)
	}
}

func TestCopyTellsWhetherAFieldShouldChange(t *testing.T) {
	table := NewTable()
	first := strings.Clone("kfsm.dev/machine")
	if c, change := table.Copy(first); c != first || change {
		t.Fatalf("the first copy: %q, %v; want it back, unchanged", c, change)
	}
	if _, change := table.Copy(first); change {
		t.Error("the table's own copy is to be changed")
	}
	second := strings.Clone(first)
	if c, change := table.Copy(second); !change || unsafe.StringData(c) != unsafe.StringData(first) {
		t.Errorf("an equal string: change %v, want the table's copy", change)
	}
}

func TestSiblingsShareAnEqualMapOfOneOwner(t *testing.T) {
	s := NewSiblings()
	labels := map[string]string{"owner": "a", "team": "blue"}
	if got := s.Find("a", labels); got != nil {
		t.Fatalf("nothing kept yet, and Find returned %v", got)
	}
	s.Keep("a", labels)
	equal := map[string]string{"owner": "a", "team": "blue"}
	if got := s.Find("a", equal); got == nil || reflect.ValueOf(got).Pointer() != reflect.ValueOf(labels).Pointer() {
		t.Error("an equal map of the same owner did not find the one kept")
	}
	if got := s.Find("b", equal); got != nil {
		t.Error("another owner's objects found the map kept for a")
	}
	if got := s.Find("a", map[string]string{"owner": "a"}); got != nil {
		t.Error("a map that differs found the one kept")
	}
	if got := s.Find("", equal); got != nil {
		t.Error("an object of no owner found a map")
	}
}
