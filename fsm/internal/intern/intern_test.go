package intern

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

func TestShareReturnsOneCopy(t *testing.T) {
	table := New()
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
	table := New()
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
