// Package mutation reads a CustomResourceDefinition's schema and suggests
// changes of an object's spec from it: boundary values, enum values,
// removals, emptied and filled arrays and maps. fsmtest's Mutator makes
// them against the API server.
package mutation

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Mutation is one change of an object's spec, as fsmtest.Mutation says
// it (the two convert into each other).
type Mutation struct {
	Path  string
	What  string
	Value any
}

func (m Mutation) String() string { return m.Path + ": " + m.What }

// Of reads the schema of crd's served storage version (or, when the
// storage version is not served, of its first served version) and
// returns the kind it is of and the changes of a spec that it suggests.
func Of(crd *apiextensionsv1.CustomResourceDefinition) (schema.GroupVersionKind, []Candidate, error) {
	if crd == nil {
		return schema.GroupVersionKind{}, nil, errNoCRD
	}
	wrap := func(err error) error { return fmt.Errorf("CustomResourceDefinition %q: %w", crd.Name, err) }
	var version *apiextensionsv1.CustomResourceDefinitionVersion
	for i, v := range crd.Spec.Versions {
		if v.Served && (version == nil || v.Storage) {
			version = &crd.Spec.Versions[i]
		}
	}
	if version == nil {
		return schema.GroupVersionKind{}, nil, wrap(errNoServedVersion)
	}
	if version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
		return schema.GroupVersionKind{}, nil, wrap(fmt.Errorf("version %s: %w", version.Name, errNoSchema))
	}
	spec, ok := version.Schema.OpenAPIV3Schema.Properties["spec"]
	if !ok {
		return schema.GroupVersionKind{}, nil, wrap(fmt.Errorf("version %s: %w", version.Name, errNoSpec))
	}
	if spec.Type != "object" {
		return schema.GroupVersionKind{}, nil, wrap(fmt.Errorf("version %s: %w, but of type %q", version.Name, errSpecNotObject, spec.Type))
	}
	g := &generator{seen: map[string]bool{}}
	g.children(&spec, nil, 0)
	gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: version.Name, Kind: crd.Spec.Names.Kind}
	return gvk, g.out, nil
}

// Listed is c as a list of candidates shows it: an element to append or
// a key to add or remove is [*], and the value is nil where it depends
// on the object (a flip, an element appended, a key added or removed).
func (c Candidate) Listed() Mutation {
	v := c.value
	if c.op != set {
		v = nil
	}
	at := c.at
	switch c.op {
	case appendItem:
		at = under(at, step{kind: element, index: -1})
	case addKey, removeKey:
		at = under(at, step{kind: key})
	}
	return Mutation{Path: path(at), What: c.what, Value: runtime.DeepCopyJSONValue(v)}
}

// Made is a candidate made in one object's spec.
type Made struct {
	Mutation
	at      []step
	removal bool
}

// Stored returns the value at the change's field in spec, the spec as
// the API server stored it (after its defaults); nil for a removal.
func (m Made) Stored(spec any) any {
	if m.removal {
		return nil
	}
	v, _ := lookup(spec, m.at)
	return v
}

// Make makes c in spec, a copy of an object's spec, and returns the
// change; false if c does not apply to this object, such as a field of
// an element that the array lacks.
func (c Candidate) Make(spec map[string]any) (Made, bool) {
	at, value, what, ok := c.change(spec)
	if !ok {
		return Made{}, false
	}
	return Made{Mutation: Mutation{Path: path(at), What: what, Value: value}, at: at, removal: c.op == remove || c.op == removeKey}, true
}

// change makes c in spec, a copy of an object's spec, and returns the
// path it changed, the value it set and the change in words; false if c
// does not apply to this object, such as a field of an element that the
// array lacks.
func (c Candidate) change(spec map[string]any) (at []step, value any, what string, ok bool) {
	last := c.at[len(c.at)-1]
	parent, ok := lookup(spec, c.at[:len(c.at)-1])
	if !ok {
		return nil, nil, "", false
	}
	cur, has := lookup(parent, []step{last})
	switch c.op {
	case set:
		value = runtime.DeepCopyJSONValue(c.value)
		return c.at, value, c.what, put(parent, last, value)
	case remove:
		fields, isMap := parent.(map[string]any)
		if !has || !isMap {
			return nil, nil, "", false
		}
		delete(fields, last.name)
		return c.at, nil, c.what, true
	case flip:
		b, _ := cur.(bool)
		return c.at, !b, fmt.Sprintf("flipped to %t", !b), put(parent, last, !b)
	case appendItem:
		items, isList := cur.([]any)
		if has && cur != nil && !isList {
			return nil, nil, "", false
		}
		item, built := build(c.item, len(items), len(c.at))
		at = under(c.at, step{kind: element, index: len(items)})
		return at, item, c.what, built && put(parent, last, append(slices.Clone(items), item))
	}
	return c.changeMap(parent, cur)
}

// changeMap adds a key to a map, or removes its first.
func (c Candidate) changeMap(parent, cur any) (at []step, value any, what string, ok bool) {
	last := c.at[len(c.at)-1]
	fields, _ := cur.(map[string]any)
	if cur != nil && fields == nil {
		return nil, nil, "", false
	}
	fields = maps.Clone(fields)
	if fields == nil {
		fields = map[string]any{}
	}
	var name string
	switch c.op {
	case addKey:
		for i := 1; name == "" || fields[name] != nil; i++ {
			name = "k" + strconv.Itoa(i)
		}
		v, built := build(c.item, 0, len(c.at))
		if !built {
			return nil, nil, "", false
		}
		fields[name], value = v, v
	case removeKey:
		if len(fields) == 0 {
			return nil, nil, "", false
		}
		name = slices.Sorted(maps.Keys(fields))[0]
		delete(fields, name)
	}
	return under(c.at, step{name: name, kind: key}), value, c.what, put(parent, last, fields)
}

// lookup returns the value at at under v.
func lookup(v any, at []step) (any, bool) {
	for _, s := range at {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[s.name]; !ok || s.kind == element {
				return nil, false
			}
		case []any:
			if s.kind != element || s.index < 0 || s.index >= len(x) {
				return nil, false
			}
			v = x[s.index]
		default:
			return nil, false
		}
	}
	return v, true
}

// put sets the field or the element s of parent to v.
func put(parent any, s step, v any) bool {
	switch x := parent.(type) {
	case map[string]any:
		if s.kind == element {
			return false
		}
		x[s.name] = v
		return true
	case []any:
		if s.kind != element || s.index < 0 || s.index >= len(x) {
			return false
		}
		x[s.index] = v
		return true
	}
	return false
}
