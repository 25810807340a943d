package fsmtest_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/jsonpath"

	"github.com/kfsm/kfsm/fsmtest"
)

// The Pump's CRD (testdata/crd) has bounds, an enum, required and
// optional fields, an array with maxItems, a map, and two CEL rules:
// low <= high, and the transition rule that size may only grow.
const (
	sizeRule = "size may only grow"
	lowRule  = "low must not be above high"
)

func newPump(e *fsmtest.Env, name string) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "fsmtest.kfsm.dev/v1",
		"kind":       "Pump",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"size": int64(5), "mode": "Running", "low": int64(40), "high": int64(60)},
	}}
	e.Create(p)
	return p
}

func pumpMutations(t *testing.T, e *fsmtest.Env, seed int64) *fsmtest.Mutator {
	t.Helper()
	m, err := fsmtest.Mutations(e.CRD(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "fsmtest.kfsm.dev/v1", "kind": "Pump",
	}}), seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Every change that Apply makes is on the server afterwards, is the only
// change of the spec (with what the API server defaulted under it), and
// keeps to the CEL rules; the changes that the rules refuse are counted
// and never made.
func TestApplyKeepsToTheSchemaAndTheRules(t *testing.T) {
	e := fsmtest.New(t)
	pump := newPump(e, "p")
	m := pumpMutations(t, e, 7)
	for i := range 40 {
		before := leaves(pump.Object["spec"], "['spec']")
		made := m.Apply(e, pump, 1)
		if len(made) != 1 {
			t.Fatalf("change %d: Apply made %d changes, want 1", i+1, len(made))
		}
		mut := made[0]
		got, found := valueAt(t, pump, mut.Path)
		switch removal := strings.Contains(mut.What, "removed"); {
		case removal && found:
			t.Errorf("change %d, %s: still there, as %#v", i+1, mut, got)
		case !removal && !found:
			t.Errorf("change %d, %s: not on the server", i+1, mut)
		case !removal && !cmp.Equal(mut.Value, got):
			t.Errorf("change %d, %s: the server has %#v, Apply said %#v", i+1, mut, got, mut.Value)
		}
		after := leaves(pump.Object["spec"], "['spec']")
		for _, p := range changed(before, after) {
			// Under the field, or the field's empty parent that it filled.
			if at := bracketed(mut.Path); !strings.HasPrefix(p, at) && !strings.HasPrefix(at, p) {
				t.Errorf("change %d, %s: %s changed too", i+1, mut, p)
			}
		}
		if low, high := after[bracketed(".spec.low")], after[bracketed(".spec.high")]; low != nil && high != nil && low.(int64) > high.(int64) {
			t.Errorf("change %d, %s: low %d is above high %d, which the rule refuses", i+1, mut, low, high)
		}
		if size, was := after[bracketed(".spec.size")].(int64), before[bracketed(".spec.size")].(int64); size < was {
			t.Errorf("change %d, %s: size went from %d down to %d, which the transition rule refuses", i+1, mut, was, size)
		}
	}
	byRule := map[string]int{}
	for _, r := range m.Refused() {
		for _, rule := range []string{sizeRule, lowRule} {
			if strings.Contains(r.Reason, rule) {
				byRule[rule]++
			}
		}
	}
	if byRule[sizeRule] == 0 || byRule[lowRule] == 0 {
		t.Errorf("refusals by rule: %v, want some by each; all refusals:\n%v", byRule, m.Refused())
	}
}

// The same seed makes the same changes, in another Env (as in each run
// of a Faults scenario) and with another Mutator; another seed makes
// others.
func TestApplyIsReproducibleFromTheSeed(t *testing.T) {
	e, other := fsmtest.New(t), fsmtest.New(t)
	m := pumpMutations(t, e, 3)
	first := m.Apply(e, newPump(e, "p"), 10)
	if len(first) != 10 {
		t.Fatalf("Apply made %d changes, want 10", len(first))
	}
	if diff := cmp.Diff(first, m.Apply(other, newPump(other, "p"), 10)); diff != "" {
		t.Errorf("the same Mutator in another Env (-first +other):\n%s", diff)
	}
	if diff := cmp.Diff(first, pumpMutations(t, e, 3).Apply(e, newPump(e, "q"), 10)); diff != "" {
		t.Errorf("another Mutator of the same seed (-first +again):\n%s", diff)
	}
	if diff := cmp.Diff(first, pumpMutations(t, e, 4).Apply(e, newPump(e, "r"), 10)); diff == "" {
		t.Errorf("seeds 3 and 4 made the same changes:\n%v", first)
	}
}

// valueAt reads the value at path in obj, as kubectl's JSONPath does.
func valueAt(t *testing.T, obj *unstructured.Unstructured, path string) (any, bool) {
	t.Helper()
	j := jsonpath.New("value")
	if err := j.Parse("{" + path + "}"); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	results, err := j.FindResults(obj.Object)
	if err != nil || len(results) == 0 || len(results[0]) == 0 {
		return nil, false
	}
	return results[0][0].Interface(), true
}

// leaves are the scalars, empty arrays and empty maps under v, by their
// paths with every name in brackets: .spec['tiers'][0]['name'].
func leaves(v any, at string) map[string]any {
	out := map[string]any{}
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			for p, leaf := range leaves(child, at+"['"+k+"']") {
				out[p] = leaf
			}
		}
	case []any:
		for i, child := range x {
			for p, leaf := range leaves(child, fmt.Sprintf("%s[%d]", at, i)) {
				out[p] = leaf
			}
		}
	}
	if len(out) == 0 {
		out[at] = v
	}
	return out
}

// bracketed writes path's names in brackets, as leaves does.
func bracketed(path string) string {
	return "['spec']" + regexp.MustCompile(`\.([A-Za-z0-9_-]+)`).ReplaceAllString(strings.TrimPrefix(path, ".spec"), "['$1']")
}

// changed are the paths whose leaves differ between a and b.
func changed(a, b map[string]any) []string {
	var out []string
	for p, v := range a {
		if w, ok := b[p]; !ok || !cmp.Equal(v, w) {
			out = append(out, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Mutations' errors say that they are fsmtest's and name the CRD.
func TestMutationsOfABadCRDSayWhich(t *testing.T) {
	unserved := &apiextensionsv1.CustomResourceDefinition{}
	unserved.Name = "things.example.com"
	cases := map[string]struct {
		crd  *apiextensionsv1.CustomResourceDefinition
		want string
	}{
		"Nil":             {want: "fsmtest: mutations: no CustomResourceDefinition"},
		"NoServedVersion": {crd: unserved, want: `fsmtest: CustomResourceDefinition "things.example.com": it serves no version`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := fsmtest.Mutations(tc.crd, 1)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Mutations: %v, %v; want the error %q", m, err, tc.want)
			}
		})
	}
}
