package mutation

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// pumpCRD is the test resource of fsmtest's mutation tests.
func pumpCRD(t testing.TB) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "crd", "fsmtest.kfsm.dev_pumps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// crdOf is a CRD with one served storage version of this spec schema.
func crdOf(spec apiextensionsv1.JSONSchemaProps) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "things.example.com"
	crd.Spec.Group, crd.Spec.Names.Kind = "example.com", "Thing"
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{{
		Name: "v1", Served: true, Storage: true,
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type:       "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec},
		}},
	}}
	return crd
}

// listed is the candidates of crd as a list shows them.
func listed(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) []Mutation {
	t.Helper()
	_, candidates, err := Of(crd)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Mutation, 0, len(candidates))
	for _, c := range candidates {
		out = append(out, c.Listed())
	}
	return out
}

func TestCandidatesOfTheSchema(t *testing.T) {
	got := listed(t, pumpCRD(t))
	want := []Mutation{
		{Path: ".spec.size", What: "the minimum, 1", Value: int64(1)},
		{Path: ".spec.size", What: "the maximum, 10", Value: int64(10)},
		{Path: ".spec.size", What: "the middle, 5", Value: int64(5)},
		{Path: ".spec.high", What: "just below the exclusive maximum, 99", Value: int64(99)},
		{Path: ".spec.high", What: "the minimum, 0", Value: int64(0)},
		{Path: ".spec.high", What: "removed"},
		{Path: ".spec.rate", What: "just above the exclusive minimum, 5e-324", Value: 5e-324},
		{Path: ".spec.rate", What: "the maximum, 2.5", Value: 2.5},
		{Path: ".spec.mode", What: "Stopped, of the enum", Value: "Stopped"},
		{Path: ".spec.note", What: "empty", Value: ""},
		{Path: ".spec.note", What: "the longest, 8 characters", Value: "aaaaaaaa"},
		{Path: ".spec.paused", What: "flipped"},
		{Path: ".spec.surge", What: "an int, 1", Value: int64(1)},
		{Path: ".spec.surge", What: "a string, 50%", Value: "50%"},
		{Path: ".spec.tiers", What: "emptied", Value: []any{}},
		{Path: ".spec.tiers", What: "at maxItems, 3 elements", Value: []any{
			map[string]any{"name": "a"}, map[string]any{"name": "b"}, map[string]any{"name": "c"},
		}},
		{Path: ".spec.tiers[*]", What: "an element appended"},
		{Path: ".spec.tiers[0].name", What: "the shortest, 1 character", Value: "a"},
		{Path: ".spec.tiers[0].weight", What: "the default, 1", Value: int64(1)},
		{Path: ".spec.labels", What: "emptied", Value: map[string]any{}},
		{Path: ".spec.labels[*]", What: "a key added"},
		{Path: ".spec.labels[*]", What: "a key removed"},
		{Path: ".spec.window", What: "only its required fields", Value: map[string]any{"start": "2030-01-01T00:00:00Z"}},
		{Path: ".spec.window", What: "null"},
		{Path: ".spec.window.start", What: "a date-time, 2030-01-01T00:00:00Z", Value: "2030-01-01T00:00:00Z"},
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(m Mutation) bool { return cmp.Equal(w, m) }) {
			t.Errorf("no candidate %s = %#v among:\n%s", w, w.Value, list(got))
		}
	}
	// Required fields are never removed, nor a field with a default (the
	// API server would put it back), and bounds are kept.
	for _, never := range []Mutation{
		{Path: ".spec.size", What: "removed"},
		{Path: ".spec.mode", What: "removed"},
		{Path: ".spec.tiers[0].name", What: "removed"},
		{Path: ".spec.tiers[0].weight", What: "removed"},
		{Path: ".spec.size", What: "zero", Value: int64(0)},
		{Path: ".spec.rate", What: "zero", Value: 0.0},
		{Path: ".spec.high", What: "the maximum, 100", Value: int64(100)},
	} {
		if slices.ContainsFunc(got, func(m Mutation) bool { return cmp.Equal(never, m) }) {
			t.Errorf("candidate %s should not be there", never)
		}
	}
	// The order is fixed: by field name, depth first.
	if diff := cmp.Diff(got, listed(t, pumpCRD(t))); diff != "" {
		t.Errorf("candidates differ between two readings of one schema (-first +second):\n%s", diff)
	}
	if i, j := index(got, ".spec.high"), index(got, ".spec.labels"); i > j {
		t.Errorf(".spec.high comes at %d, after .spec.labels at %d", i, j)
	}
}

func index(ms []Mutation, path string) int {
	return slices.IndexFunc(ms, func(m Mutation) bool { return m.Path == path })
}

func list(ms []Mutation) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "\t%s = %#v\n", m, m.Value)
	}
	return b.String()
}

func TestOfABadCRD(t *testing.T) {
	unserved := crdOf(apiextensionsv1.JSONSchemaProps{Type: "object"})
	unserved.Spec.Versions[0].Served = false
	noSchema := crdOf(apiextensionsv1.JSONSchemaProps{Type: "object"})
	noSchema.Spec.Versions[0].Schema = nil
	noSpec := crdOf(apiextensionsv1.JSONSchemaProps{Type: "object"})
	delete(noSpec.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties, "spec")
	cases := map[string]struct {
		reason string
		crd    *apiextensionsv1.CustomResourceDefinition
		want   error
	}{
		"Nil":             {reason: "no CRD at all", crd: nil, want: errNoCRD},
		"NoServedVersion": {reason: "a CRD that serves no version", crd: unserved, want: errNoServedVersion},
		"NoSchema":        {reason: "a version without a schema", crd: noSchema, want: errNoSchema},
		"NoSpec":          {reason: "a schema without spec", crd: noSpec, want: errNoSpec},
		"SpecNotObject":   {reason: "a spec that is a string", crd: crdOf(apiextensionsv1.JSONSchemaProps{Type: "string"}), want: errSpecNotObject},
		"Good":            {reason: "a spec with no fields", crd: crdOf(apiextensionsv1.JSONSchemaProps{Type: "object"})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Of(tc.crd)
			if diff := cmp.Diff(tc.want, err, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("%s: error (-want +got):\n%s", tc.reason, diff)
			}
			if err != nil && tc.crd != nil && !strings.Contains(err.Error(), tc.crd.Name) {
				t.Errorf("%s: the error %q does not name the CRD", tc.reason, err)
			}
		})
	}
}

// The storage version is the one read, when it is served.
func TestOfReadsTheStorageVersion(t *testing.T) {
	crd := crdOf(apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"new": {Type: "boolean"},
	}})
	old := crdOf(apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"old": {Type: "boolean"},
	}}).Spec.Versions[0]
	old.Name, old.Storage = "v1beta1", false
	crd.Spec.Versions = append([]apiextensionsv1.CustomResourceDefinitionVersion{old}, crd.Spec.Versions...)
	gvk, _, err := Of(crd)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mutation{{Path: ".spec.new", What: "flipped"}, {Path: ".spec.new", What: "removed"}}
	if diff := cmp.Diff(want, listed(t, crd)); diff != "" {
		t.Errorf("candidates (-want +got):\n%s", diff)
	}
	if gvk.Version != "v1" {
		t.Errorf("version %s, want v1", gvk.Version)
	}
}

// A schema that refers to itself, as one built in Go can, or that is
// very deep or very wide, yields a bounded number of candidates.
func TestCandidatesAreBounded(t *testing.T) {
	list := &apiextensionsv1.JSONSchemaProps{Type: "array"}
	list.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: list}
	tree := &apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"leaf"}}
	tree.AdditionalProperties = &apiextensionsv1.JSONSchemaPropsOrBool{Schema: tree}
	deep := apiextensionsv1.JSONSchemaProps{Type: "integer"}
	for range 30 {
		deep = apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"f": deep}}
	}
	wide := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{}}
	for i := range 2000 {
		wide.Properties[fmt.Sprintf("f%04d", i)] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
	}
	cases := map[string]struct {
		reason string
		spec   apiextensionsv1.JSONSchemaProps
		most   int
	}{
		"SelfReferringArray": {reason: "an array of itself", spec: objectOf("list", *list), most: maxCandidates},
		"SelfReferringMap":   {reason: "a map of itself", spec: objectOf("tree", *tree), most: maxCandidates},
		"Deep":               {reason: "30 levels of objects", spec: deep, most: maxCandidates},
		"Wide":               {reason: "2000 integers", spec: wide, most: maxCandidates},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, candidates, err := Of(crdOf(tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			if len(candidates) == 0 || len(candidates) > tc.most {
				t.Errorf("%s: %d candidates, want 1 to %d", tc.reason, len(candidates), tc.most)
			}
			for _, c := range candidates {
				if len(c.at) > maxDepth {
					t.Errorf("%s: candidate %s is %d levels deep, more than %d", tc.reason, path(c.at), len(c.at), maxDepth)
					break
				}
			}
		})
	}
}

func objectOf(name string, field apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{name: field}}
}

// A built value keeps to the schema: its bounds, its lengths, and
// distinct elements where there are several.
func TestBuild(t *testing.T) {
	ptr := func(v float64) *float64 { return &v }
	n := func(v int64) *int64 { return &v }
	cases := map[string]struct {
		reason  string
		schema  apiextensionsv1.JSONSchemaProps
		variant int
		want    any
	}{
		"IntAtMinimum":       {reason: "the minimum", schema: apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr(3)}, want: int64(3)},
		"IntAboveExclusive":  {reason: "above an exclusive minimum", schema: apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr(3), ExclusiveMinimum: true}, want: int64(4)},
		"IntNegative":        {reason: "under a negative maximum", schema: apiextensionsv1.JSONSchemaProps{Type: "integer", Maximum: ptr(-2)}, want: int64(-2)},
		"IntVariantBounded":  {reason: "a variant past the maximum", schema: apiextensionsv1.JSONSchemaProps{Type: "integer", Minimum: ptr(1), Maximum: ptr(2)}, variant: 5, want: int64(1)},
		"String":             {reason: "one letter", schema: apiextensionsv1.JSONSchemaProps{Type: "string"}, want: "a"},
		"StringMinLength":    {reason: "at its minLength", schema: apiextensionsv1.JSONSchemaProps{Type: "string", MinLength: n(3)}, want: "aaa"},
		"StringVariant":      {reason: "a variant", schema: apiextensionsv1.JSONSchemaProps{Type: "string", MinLength: n(3)}, variant: 27, want: "abb"},
		"StringEmptyAllowed": {reason: "a maxLength of 0", schema: apiextensionsv1.JSONSchemaProps{Type: "string", MaxLength: n(0)}, want: ""},
		"Default":            {reason: "its default", schema: apiextensionsv1.JSONSchemaProps{Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"x"`)}}, want: "x"},
		"Enum":               {reason: "an enum value by variant", schema: apiextensionsv1.JSONSchemaProps{Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"A"`)}, {Raw: []byte(`"B"`)}}}, variant: 1, want: "B"},
		"Object": {reason: "its required fields", schema: apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"a"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"a": {Type: "array", MinItems: n(2), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "boolean"}}},
			"b": {Type: "string"},
		}}, want: map[string]any{"a": []any{false, true}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := build(&tc.schema, tc.variant, 0)
			if !ok {
				t.Fatalf("%s: nothing built", tc.reason)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// A path is a JSONPath that kubectl takes.
func TestPath(t *testing.T) {
	cases := map[string]struct {
		reason string
		at     []step
		want   string
	}{
		"Property":      {reason: "a field", at: []step{{name: "replicas"}}, want: ".spec.replicas"},
		"Element":       {reason: "a field of an element", at: []step{{name: "tiers"}, {kind: element}, {name: "name"}}, want: ".spec.tiers[0].name"},
		"Key":           {reason: "a map's key", at: []step{{name: "labels"}, {name: "k1", kind: key}}, want: ".spec.labels['k1']"},
		"KeyWithDots":   {reason: "a key with dots, escaped", at: []step{{name: "labels"}, {name: "app.kubernetes.io/name", kind: key}}, want: `.spec.labels['app\.kubernetes\.io/name']`},
		"OddProperty":   {reason: "a field named oddly", at: []step{{name: "a b"}}, want: ".spec['a b']"},
		"AnyElement":    {reason: "an element not known yet", at: []step{{name: "tiers"}, {kind: element, index: -1}}, want: ".spec.tiers[*]"},
		"AnyKey":        {reason: "a key not known yet", at: []step{{name: "labels"}, {kind: key}}, want: ".spec.labels[*]"},
		"SecondElement": {reason: "an appended element", at: []step{{name: "tiers"}, {kind: element, index: 2}}, want: ".spec.tiers[2]"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := path(tc.at); got != tc.want {
				t.Errorf("%s: path %s, want %s", tc.reason, got, tc.want)
			}
		})
	}
}
