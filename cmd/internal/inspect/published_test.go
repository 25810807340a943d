package inspect

import (
	"strings"
	"testing"
)

// A published graph's earlier versions are read with it; one that is not
// a version's number, or not a graph, fails with the annotation named.
func TestPublishedReadsTheEarlierGraphs(t *testing.T) {
	const (
		current = `{"name":"webapp","version":2,"mode":"Lifecycle","states":[{"name":"Published","initial":true,"final":true}],"edges":[]}`
		earlier = `{"name":"webapp","mode":"Lifecycle","states":[{"name":"Registered","initial":true,"final":true}],"edges":[]}`
	)
	doc := func(earlierJSON string) map[string]string {
		return map[string]string{"graph.kfsm.dev/webapp": `{"machine":"webapp","resource":{"group":"g","version":"v1","kind":"WebApp","resource":"webapps"},"kfsmVersion":"v0.1.0","graph":` +
			current + `,"earlier":` + earlierJSON + `}`}
	}
	ms, err := published(doc(`{"1":` + earlier + `}`))
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	if g, current := m.GraphOf(0); current || g == nil || g.States[0].Name != "Registered" {
		t.Errorf("GraphOf(0) = %v, %v; want version 1's graph, not current", g, current)
	}
	if g, current := m.GraphOf(2); !current || g.States[0].Name != "Published" {
		t.Errorf("GraphOf(2) = %v, %v; want the machine's graph, current", g, current)
	}
	if g, current := m.GraphOf(3); current || g.States[0].Name != "Published" {
		t.Errorf("GraphOf(3) = %v, %v; want the machine's graph, not current", g, current)
	}
	for _, bad := range []string{`{"one":` + earlier + `}`, `{"1":{"states":7}}`} {
		if _, err := published(doc(bad)); err == nil || !strings.Contains(err.Error(), "graph.kfsm.dev/webapp") {
			t.Errorf("earlier graphs %s read with error %v, want one that names the annotation", bad, err)
		}
	}
}
