package fsmtest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
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

// Refusal is a mutation that the API server refused, and its reason.
type Refusal struct {
	Mutation
	Reason string
}

// Mutator makes changes of a kind's objects that its CRD's schema
// suggests, as Acto (SOSP '23) drives an operator: boundary values,
// enum values, removals, emptied and filled arrays. Mutations makes one.
type Mutator struct {
	gvk        schema.GroupVersionKind
	seed       int64
	candidates []candidate

	mu      sync.Mutex
	runs    map[*Env]*mutationRun
	refused []Refusal
}

// mutationRun is where an Env is in its sequence of changes.
type mutationRun struct {
	rng  *rand.PCG
	made int
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

// Refused are the changes that the API server refused, in every Apply
// so far: its OpenAPI validation, its CEL rules (x-kubernetes-validations,
// transition rules among them), or an admission webhook or policy.
func (m *Mutator) Refused() []Refusal {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.refused)
}

// Apply makes n changes of obj's spec, one after another, each drawn
// from the candidates in an order that the seed decides, and returns
// them in order; it reads obj afterwards. Each candidate is first sent
// as a server-side dry run of the updated object, so that the API server
// judges it against the object as it is now: its schema, its CEL rules
// with oldSelf, and admission. A refused candidate is never made (see
// Refused), one that would not change the object is passed over, and
// the next is tried. The accepted change is then made with an update as
// the test, read again and retried on a conflict.
//
// Each Env has a sequence of its own: the same seed, with the same
// answers from the API server, makes the same changes, in every run of
// a Faults scenario too. Apply logs each change with the seed, so that a
// failure can be reproduced. When no candidate is left that the API
// server accepts and that changes the object, Apply logs it and returns
// fewer than n.
func (m *Mutator) Apply(e *Env, obj client.Object, n int) []Mutation {
	e.T.Helper()
	e.inNamespace(obj)
	if gk := e.kindOf(obj).GroupKind(); gk != m.gvk.GroupKind() {
		e.T.Fatalf("fsmtest: the mutations are of %s, not of %s", m.gvk.GroupKind(), gk)
	}
	run := m.run(e)
	var made []Mutation
	for len(made) < n {
		mut, ok := m.applyOne(e, obj, run)
		if !ok {
			e.T.Logf("fsmtest: %s: no candidate left that changes it and that the API server accepts; %d of %d changes made",
				e.describe(obj), len(made), n)
			break
		}
		made = append(made, mut)
	}
	e.Get(obj)
	return made
}

func (m *Mutator) run(e *Env) *mutationRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[e]
	if !ok {
		r = &mutationRun{rng: rand.NewPCG(uint64(m.seed), 0)}
		m.runs[e] = r
	}
	return r
}

// order is a permutation of the candidates, drawn from the run's
// generator alone, so that the sequence does not change with Go's
// shuffling algorithms.
func (r *mutationRun) order(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := int(r.rng.Uint64() % uint64(i+1))
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// applyOne makes the first candidate, in a new order, that the API
// server accepts and that changes obj.
func (m *Mutator) applyOne(e *Env, obj client.Object, r *mutationRun) (Mutation, bool) {
	e.T.Helper()
	for _, i := range r.order(len(m.candidates)) {
		mut, made, reason := m.try(e, obj, m.candidates[i])
		if made {
			r.made++
			e.T.Logf("fsmtest: %s: change %d (seed %d): %s", e.describe(obj), r.made, m.seed, mut)
			e.snap.change("mutate " + e.describe(obj) + " " + mut.String())
			return mut, true
		}
		if reason != "" {
			e.T.Logf("fsmtest: %s: the API server refused %s: %s", e.describe(obj), mut, reason)
			m.mu.Lock()
			m.refused = append(m.refused, Refusal{Mutation: mut, Reason: reason})
			m.mu.Unlock()
		}
	}
	return Mutation{}, false
}

// try makes c if the API server accepts it and it changes obj. It
// returns the change, whether it was made, and why the API server
// refused it, if it did.
func (m *Mutator) try(e *Env, obj client.Object, c candidate) (mut Mutation, made bool, refused string) {
	e.T.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		made = false
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(m.gvk)
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		spec, _ := cur.Object["spec"].(map[string]any)
		changed, _ := runtime.DeepCopyJSONValue(spec).(map[string]any)
		if changed == nil {
			changed = map[string]any{}
		}
		at, value, what, ok := c.change(changed)
		if !ok || reflect.DeepEqual(changed, spec) {
			return nil
		}
		mut = Mutation{Path: path(at), What: what, Value: value}
		next := cur.DeepCopy()
		next.Object["spec"] = changed
		dry := next.DeepCopy()
		if err := e.Client.Update(ctx, dry, client.DryRunAll); err != nil {
			return err
		}
		if reflect.DeepEqual(dry.Object["spec"], spec) {
			return nil // the API server made it what it was, by a default
		}
		if err := e.Client.Update(ctx, next); err != nil {
			return err
		}
		if c.op != remove && c.op != removeKey {
			stored, _ := lookup(next.Object["spec"], at)
			mut.Value = stored
		}
		made = true
		return nil
	})
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) {
		return mut, false, err.Error()
	}
	if err != nil {
		e.T.Fatalf("fsmtest: changing %s of %s: %v", mut, e.describe(obj), err)
	}
	return mut, made, ""
}

// change makes c in spec, a copy of an object's spec, and returns the
// path it changed, the value it set and the change in words; false if c
// does not apply to this object, such as a field of an element that the
// array lacks.
func (c candidate) change(spec map[string]any) (at []step, value any, what string, ok bool) {
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
func (c candidate) changeMap(parent, cur any) (at []step, value any, what string, ok bool) {
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

// CRD reads the CustomResourceDefinition of obj's kind from the API
// server, as it serves it: what Mutations takes.
func (e *Env) CRD(obj client.Object) *apiextensionsv1.CustomResourceDefinition {
	e.T.Helper()
	gvk := e.kindOf(obj)
	mapping, err := e.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		e.T.Fatalf("fsmtest: the resource of %s: %v", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	name := mapping.Resource.Resource + "." + gvk.Group
	if err := e.Client.Get(context.Background(), client.ObjectKey{Name: name}, u); err != nil {
		e.T.Fatalf("fsmtest: reading CustomResourceDefinition %s: %v", name, err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
		e.T.Fatalf("fsmtest: reading CustomResourceDefinition %s: %v", name, err)
	}
	return crd
}
