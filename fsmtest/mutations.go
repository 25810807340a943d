package fsmtest

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Mutation is one change of an object's spec.
type Mutation struct {
	// Path is the field, as kubectl's JSONPath names it: .spec.replicas,
	// .spec.tiers[0].name, .spec.labels['k1']. In Candidates, an element
	// to append or a key to add or remove is [*].
	Path string
	// What says the change in words: "the maximum, 10", "removed",
	// "Stopped, of the enum", "flipped to false".
	What string
	// Value is the field's new value, as the API server stored it; nil
	// for a removal. In Candidates, nil where it depends on the object:
	// a flip, an element appended, a key added or removed.
	Value any
}

func (m Mutation) String() string { return m.Path + ": " + m.What }

// Mutator makes changes of a kind's objects that its CRD's schema
// suggests, as Acto (SOSP '23) drives an operator: boundary values,
// enum values, removals, emptied and filled arrays. Mutations makes one.
type Mutator struct {
	gvk        schema.GroupVersionKind
	seed       int64
	candidates []candidate
}

// Candidates are every change that the schema suggests, in a fixed
// order: for each field of the spec, by name and depth first, its
// default; its enum values, or for its type: an integer's or a number's
// minimum and maximum (within exclusive bounds), zero and the middle
// where the bounds allow them (-1 and the largest value where there are
// none); a string's shortest and longest values and the empty one, or a
// valid value of its format; a boolean flipped; an array emptied, at its
// minItems and maxItems, and with an element appended; a map with a key
// added and a key removed; an object with only its required fields; an
// int-or-string as an int and as a string; the schema's example; null
// where the field is nullable; the field removed where it is optional
// and has no default (the API server would default it again). Then the
// same for its fields, and for an array's first element. A value that
// the schema requires, such as an appended element, is built from the
// schema: its required fields at their least values.
//
// Depth and number are bounded: 8 levels under .spec, 1000 candidates.
func (m *Mutator) Candidates() []Mutation {
	out := make([]Mutation, 0, len(m.candidates))
	for _, c := range m.candidates {
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
		out = append(out, Mutation{Path: path(at), What: c.what, Value: runtime.DeepCopyJSONValue(v)})
	}
	return out
}
