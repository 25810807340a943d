package leancache

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// counting counts the mappings asked of a DefaultRESTMapper.
type counting struct {
	*meta.DefaultRESTMapper
	asked int
}

func (c *counting) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	return c.DefaultRESTMapper.RESTMapping(gk, versions...)
}

var (
	widgets = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	nodes   = schema.GroupVersionKind{Version: "v1", Kind: "Node"}
)

func newCounting() *counting {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{widgets.GroupVersion(), nodes.GroupVersion()})
	m.Add(widgets, meta.RESTScopeNamespace)
	m.Add(nodes, meta.RESTScopeRoot)
	return &counting{DefaultRESTMapper: m}
}

func TestMemoAsksOncePerKindAndVersion(t *testing.T) {
	inner := newCounting()
	m := Memo(inner)
	for range 3 {
		for _, gvk := range []schema.GroupVersionKind{widgets, nodes} {
			mapping, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatal(err)
			}
			if mapping.GroupVersionKind != gvk {
				t.Fatalf("mapping of %s is of %s", gvk, mapping.GroupVersionKind)
			}
		}
	}
	if inner.asked != 2 {
		t.Fatalf("the mapper was asked %d times for 2 kinds, want 2", inner.asked)
	}
	scope, _ := m.RESTMapping(nodes.GroupKind(), nodes.Version)
	if scope.Scope.Name() != meta.RESTScopeNameRoot {
		t.Fatalf("Node's scope is %q", scope.Scope.Name())
	}
}

func TestMemoHandsOutCopies(t *testing.T) {
	m := Memo(newCounting())
	first, _ := m.RESTMapping(widgets.GroupKind(), widgets.Version)
	first.Resource.Resource = "changed"
	second, _ := m.RESTMapping(widgets.GroupKind(), widgets.Version)
	if second.Resource.Resource != "widgets" {
		t.Fatalf("a caller's change reached the next caller: resource %q", second.Resource.Resource)
	}
	second.Resource.Resource = "changed again"
	third, _ := m.RESTMapping(widgets.GroupKind(), widgets.Version)
	if third.Resource.Resource != "widgets" {
		t.Fatalf("a caller's change of a remembered mapping reached the next caller: resource %q", third.Resource.Resource)
	}
}

func TestMemoAsksAgainForWhatWasNotFound(t *testing.T) {
	inner := newCounting()
	m := Memo(inner)
	gadgets := schema.GroupKind{Group: "example.com", Kind: "Gadget"}
	for range 2 {
		if _, err := m.RESTMapping(gadgets, "v1"); !meta.IsNoMatchError(err) {
			t.Fatalf("an unknown kind's mapping: %v, want a no-match error", err)
		}
	}
	if inner.asked != 2 {
		t.Fatalf("the mapper was asked %d times for an unknown kind, want 2", inner.asked)
	}
	inner.Add(gadgets.WithVersion("v1"), meta.RESTScopeNamespace)
	if _, err := m.RESTMapping(gadgets, "v1"); err != nil {
		t.Fatalf("a kind found later: %v", err)
	}
}

func TestMemoPassesThroughWithoutOneVersion(t *testing.T) {
	inner := newCounting()
	m := Memo(inner)
	for range 2 {
		if _, err := m.RESTMapping(widgets.GroupKind()); err != nil {
			t.Fatal(err)
		}
		if _, err := m.RESTMapping(widgets.GroupKind(), "v1", "v2"); err != nil {
			t.Fatal(err)
		}
	}
	if inner.asked != 4 {
		t.Fatalf("the mapper was asked %d times, want every time: 4", inner.asked)
	}
}
