package fsmtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsmtest/internal/mutation"
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

// Mutations reads the schema of crd's served storage version (or, when
// the storage version is not served, of its first served version) and
// returns what changes of an object's spec the schema suggests, to be
// made by Apply in an order drawn from seed.
func Mutations(crd *apiextensionsv1.CustomResourceDefinition, seed int64) (*Mutator, error) {
	gvk, candidates, err := mutation.Of(crd)
	if err != nil {
		if crd == nil {
			return nil, fmt.Errorf("fsmtest: mutations: %w", err)
		}
		return nil, fmt.Errorf("fsmtest: %w", err)
	}
	return &Mutator{gvk: gvk, seed: seed, candidates: candidates, runs: map[*Env]*mutationRun{}}, nil
}

// Mutator makes changes of a kind's objects that its CRD's schema
// suggests, as Acto (SOSP '23) drives an operator: boundary values,
// enum values, removals, emptied and filled arrays. Mutations makes one.
type Mutator struct {
	gvk        schema.GroupVersionKind
	seed       int64
	candidates []mutation.Candidate

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
		out = append(out, Mutation(c.Listed()))
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
		walks := e.walks.count()
		mut, made, reason := m.try(e, obj, m.candidates[i])
		if made {
			r.made++
			e.T.Logf("fsmtest: %s: change %d (seed %d): %s", e.describe(obj), r.made, m.seed, mut)
			e.snap.change("mutate "+e.describe(obj)+" "+mut.String(), walks)
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
func (m *Mutator) try(e *Env, obj client.Object, c mutation.Candidate) (mut Mutation, made bool, refused string) {
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
		change, ok := c.Make(changed)
		if !ok || reflect.DeepEqual(changed, spec) {
			return nil
		}
		mut = Mutation(change.Mutation)
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
		mut.Value = change.Stored(next.Object["spec"])
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
