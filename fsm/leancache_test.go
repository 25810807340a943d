package fsm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// leanCacheOptions returns the cache options that LeanCache makes of co.
func leanCacheOptions(t testing.TB, co cache.Options) cache.Options {
	t.Helper()
	var made cache.Options
	opts := manager.Options{NewCache: func(_ *rest.Config, co cache.Options) (cache.Cache, error) {
		made = co
		return nil, nil
	}}
	fsm.LeanCache(&opts)
	if _, err := opts.NewCache(&rest.Config{}, co); err != nil {
		t.Fatal(err)
	}
	return made
}

// decoded returns a copy of obj decoded from JSON, whose strings are
// its own, as an informer's are.
func decoded[T any](t *testing.T, obj *T) *T {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}

var managed = []metav1.ManagedFieldsEntry{{Manager: "kfsm", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:data":{}}`)}}

func annotate(value string) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		o := obj.(client.Object)
		o.SetAnnotations(map[string]string{"transformed-by": value})
		return o, nil
	}
}

// LeanCache drops managed fields after every transform the options give,
// at each level where they can give one, and keeps their errors.
func TestLeanCacheRunsAfterTheCachesOwnTransforms(t *testing.T) {
	failing := errors.New("refused by the user's transform")
	cases := map[string]struct {
		reason    string
		co        cache.Options
		transform func(cache.Options) toolscache.TransformFunc
		want      map[string]string // the annotations left
		err       error
	}{
		"NoTransform": {
			reason:    "Without a transform of its own, the cache drops the managed fields.",
			transform: func(co cache.Options) toolscache.TransformFunc { return co.DefaultTransform },
		},
		"DefaultTransform": {
			reason:    "The default transform runs first.",
			co:        cache.Options{DefaultTransform: annotate("default")},
			transform: func(co cache.Options) toolscache.TransformFunc { return co.DefaultTransform },
			want:      map[string]string{"transformed-by": "default"},
		},
		"NamespaceTransform": {
			reason:    "A namespace's transform runs first.",
			co:        cache.Options{DefaultNamespaces: map[string]cache.Config{"ns": {Transform: annotate("namespace")}}},
			transform: func(co cache.Options) toolscache.TransformFunc { return co.DefaultNamespaces["ns"].Transform },
			want:      map[string]string{"transformed-by": "namespace"},
		},
		"ObjectTransform": {
			reason: "A kind's transform runs first.",
			co:     cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Transform: annotate("kind")}}},
			transform: func(co cache.Options) toolscache.TransformFunc {
				for _, b := range co.ByObject {
					return b.Transform
				}
				return nil
			},
			want: map[string]string{"transformed-by": "kind"},
		},
		"ObjectNamespaceTransform": {
			reason: "A kind's transform in one namespace runs first.",
			co: cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
				Namespaces: map[string]cache.Config{"ns": {Transform: annotate("kind in ns")}},
			}}},
			transform: func(co cache.Options) toolscache.TransformFunc {
				for _, b := range co.ByObject {
					return b.Namespaces["ns"].Transform
				}
				return nil
			},
			want: map[string]string{"transformed-by": "kind in ns"},
		},
		"TransformError": {
			reason: "An error of the options' transform is the cache's.",
			co: cache.Options{DefaultTransform: func(any) (any, error) {
				return nil, failing
			}},
			transform: func(co cache.Options) toolscache.TransformFunc { return co.DefaultTransform },
			err:       failing,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			transform := tc.transform(leanCacheOptions(t, tc.co))
			if transform == nil {
				t.Fatalf("%s\nLeanCache left no transform", tc.reason)
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ManagedFields: managed}}
			out, err := transform(cm)
			if diff := cmp.Diff(tc.err, err, cmpopts.EquateErrors()); diff != "" {
				t.Fatalf("%s\nerror: -want +got:\n%s", tc.reason, diff)
			}
			if err != nil {
				return
			}
			got := out.(*corev1.ConfigMap)
			if got.ManagedFields != nil {
				t.Errorf("%s\nthe cached object kept its managed fields: %v", tc.reason, got.ManagedFields)
			}
			if diff := cmp.Diff(tc.want, got.Annotations); diff != "" {
				t.Errorf("%s\nannotations: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
	// The options given are left as they were.
	co := cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Transform: annotate("kind")}}}
	leanCacheOptions(t, co)
	for _, b := range co.ByObject {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ManagedFields: managed}}
		if _, err := b.Transform(cm); err != nil || cm.ManagedFields == nil {
			t.Errorf("LeanCache changed the options it was given: managed fields %v, error %v", cm.ManagedFields, err)
		}
	}
}

// Objects decoded one by one hold a copy each of the same strings; the
// lean cache keeps one, and nothing that a reader sees changes.
func TestLeanCacheSharesRepeatingStrings(t *testing.T) {
	transform := leanCacheOptions(t, cache.Options{}).DefaultTransform
	lean := func(obj any) any {
		t.Helper()
		out, err := transform(obj)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace:       "ns",
		Name:            "a",
		Labels:          map[string]string{fsm.LabelMachine: "web", fsm.LabelOwnerUID: "uid-a", "team": "blue"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "testing.kfsm.dev/v1alpha1", Kind: "Gadget", Name: "a", UID: "uid-a"}},
		ManagedFields:   managed,
	}}
	a, b := decoded(t, child), decoded(t, child)
	b.Labels[fsm.LabelOwnerUID] = "uid-b"
	wantA, wantB := a.DeepCopy(), b.DeepCopy()
	wantA.ManagedFields, wantB.ManagedFields = nil, nil
	lean(a)
	lean(b)
	if diff := cmp.Diff(wantA, a); diff != "" {
		t.Errorf("the cached object changed: -want +got:\n%s", diff)
	}
	if diff := cmp.Diff(wantB, b); diff != "" {
		t.Errorf("the cached object changed: -want +got:\n%s", diff)
	}
	same := func(what, x, y string) {
		t.Helper()
		if unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s %q: two copies, want one", what, x)
		}
	}
	labelKey := func(labels map[string]string, key string) string {
		for k := range labels {
			if k == key {
				return k
			}
		}
		t.Fatalf("no label %s", key)
		return ""
	}
	same("namespace", a.Namespace, b.Namespace)
	for _, k := range []string{fsm.LabelMachine, fsm.LabelOwnerUID, "team"} {
		same("label key", labelKey(a.Labels, k), labelKey(b.Labels, k))
	}
	same("label value", a.Labels[fsm.LabelMachine], b.Labels[fsm.LabelMachine])
	same("owner kind", a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind)
	same("owner API version", a.OwnerReferences[0].APIVersion, b.OwnerReferences[0].APIVersion)

	parent := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	parent.Status.State = "Serving"
	parent.Status.Conditions = []metav1.Condition{{Type: fsm.ConditionReady, Status: metav1.ConditionTrue, Reason: "Serving", Message: "in state Serving"}}
	parent.Status.History = []fsm.Transition{{From: "Config", To: "Serving", Reason: "Next"}}
	parent.Status.Outputs = []fsm.OutputRef{{Kind: "ConfigMap", Namespace: "ns", Name: "g", State: "Config", UID: "uid-c"}}
	g, h := decoded(t, parent), decoded(t, parent)
	want := g.DeepCopy()
	lean(g)
	lean(h)
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("the cached object changed: -want +got:\n%s", diff)
	}
	gs, hs := g.FSMStatus(), h.FSMStatus()
	same("state", string(gs.State), string(hs.State))
	same("condition type", gs.Conditions[0].Type, hs.Conditions[0].Type)
	same("condition status", string(gs.Conditions[0].Status), string(hs.Conditions[0].Status))
	same("condition reason", gs.Conditions[0].Reason, hs.Conditions[0].Reason)
	same("history from", string(gs.History[0].From), string(hs.History[0].From))
	same("history reason", gs.History[0].Reason, hs.History[0].Reason)
	same("output kind", gs.Outputs[0].Kind, hs.Outputs[0].Kind)
	same("output state", string(gs.Outputs[0].State), string(hs.Outputs[0].State))
}

// A decoder grows each list of the status by doubling it, so that a full
// history of ten transitions holds room for seventeen; the cache keeps each
// list with the room its entries need, and the same entries.
func TestLeanCacheKeepsNoRoomInTheStatusLists(t *testing.T) {
	transform := leanCacheOptions(t, cache.Options{}).DefaultTransform
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	st := &g.Status.Status
	for i := range 10 {
		st.History = append(st.History, fsm.Transition{From: "A", To: "B", Reason: fmt.Sprint("R", i)})
	}
	for i := range 5 {
		st.Conditions = append(st.Conditions, metav1.Condition{Type: fmt.Sprint("T", i), Status: metav1.ConditionTrue, Reason: "Passed"})
	}
	for i := range 3 {
		st.Outputs = append(st.Outputs, fsm.OutputRef{Kind: "ConfigMap", Namespace: "ns", Name: fmt.Sprint("c", i)})
	}
	d := decoded(t, g)
	ds := d.FSMStatus()
	if cap(ds.History) == len(ds.History) && cap(ds.Conditions) == len(ds.Conditions) && cap(ds.Outputs) == len(ds.Outputs) {
		t.Fatalf("the decoder left no room (capacities %d, %d and %d): the test shows nothing", cap(ds.History), cap(ds.Conditions), cap(ds.Outputs))
	}
	want := d.DeepCopy()
	if _, err := transform(d); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("the cached object changed: -want +got:\n%s", diff)
	}
	for _, l := range []struct {
		name     string
		len, cap int
	}{{"history", len(ds.History), cap(ds.History)}, {"conditions", len(ds.Conditions), cap(ds.Conditions)}, {"outputs", len(ds.Outputs), cap(ds.Outputs)}} {
		if l.cap != l.len {
			t.Errorf("the %s hold %d entries in room for %d, want no more room than they need", l.name, l.len, l.cap)
		}
	}
}

// The children of one parent with the same labels hold one map of them
// in the cache; a child whose labels differ, or another parent's, keeps
// its own; and a transform that runs again changes no shared map.
func TestLeanCacheSharesTheLabelsOfSiblings(t *testing.T) {
	transform := leanCacheOptions(t, cache.Options{}).DefaultTransform
	lean := func(obj *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		if _, err := transform(obj); err != nil {
			t.Fatal(err)
		}
		return obj
	}
	labels := map[string]string{fsm.LabelManagedBy: "kfsm", fsm.LabelMachine: "web", fsm.LabelOwnerUID: "uid-a"}
	child := func(name string, labels map[string]string) *corev1.ConfigMap {
		return decoded(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels}})
	}
	sameMap := func(x, y map[string]string) bool { return reflect.ValueOf(x).Pointer() == reflect.ValueOf(y).Pointer() }

	first, second := lean(child("a", labels)), lean(child("b", labels))
	if !sameMap(first.Labels, second.Labels) {
		t.Error("two children of one parent with the same labels hold a map each")
	}
	other := map[string]string{fsm.LabelManagedBy: "kfsm", fsm.LabelMachine: "web", fsm.LabelOwnerUID: "uid-b"}
	differing := map[string]string{fsm.LabelManagedBy: "kfsm", fsm.LabelMachine: "web", fsm.LabelOwnerUID: "uid-a", "tier": "db"}
	for _, c := range []*corev1.ConfigMap{lean(child("c", other)), lean(child("d", differing))} {
		if sameMap(first.Labels, c.Labels) {
			t.Errorf("child %s with labels %v shares the map of labels %v", c.Name, c.Labels, first.Labels)
		}
		if want := map[string]string(nil); c.Name == "c" && !maps.Equal(c.Labels, other) || c.Name == "d" && !maps.Equal(c.Labels, differing) {
			t.Errorf("child %s has labels %v%v", c.Name, c.Labels, want)
		}
	}
	if !maps.Equal(first.Labels, labels) || !maps.Equal(second.Labels, labels) {
		t.Errorf("the siblings' labels are %v and %v, want %v", first.Labels, second.Labels, labels)
	}
	// Read the map on one goroutine while the transform runs again on
	// its sibling: the race detector fails the test if the transform
	// writes to it.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			_ = first.Labels[fsm.LabelOwnerUID]
		}
	}()
	for range 100 {
		lean(second)
	}
	<-done
}

// Through a real cache: the children of one parent share their labels'
// map, and each copy a reader gets is its own to change.
func TestLeanCacheSiblingsReadAsCopies(t *testing.T) {
	fe := fsmtest.New(t)
	ns := fe.Namespace
	opts := manager.Options{}
	fsm.LeanCache(&opts)
	c, err := opts.NewCache(fe.Config(), cache.Options{Scheme: fe.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = c.Start(ctx) }()
	labels := map[string]string{fsm.LabelManagedBy: "kfsm", fsm.LabelMachine: "web", fsm.LabelOwnerUID: "uid-a"}
	for _, name := range []string{"a", "b"} {
		fe.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: maps.Clone(labels)}})
	}
	var a, b corev1.ConfigMap
	for c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &a) != nil || c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b"}, &b) != nil {
		select {
		case <-ctx.Done():
			t.Fatal("the ConfigMaps never reached the cache")
		case <-time.After(10 * time.Millisecond):
		}
	}
	var shared []corev1.ConfigMap
	for _, name := range []string{"a", "b"} {
		var list corev1.ConfigMapList
		if err := c.List(t.Context(), &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			t.Fatal(err)
		}
		for _, cm := range list.Items {
			if cm.Name == name {
				shared = append(shared, cm)
			}
		}
	}
	if len(shared) != 2 || reflect.ValueOf(shared[0].Labels).Pointer() != reflect.ValueOf(shared[1].Labels).Pointer() {
		t.Fatalf("the cache holds %d siblings, not sharing one map of labels", len(shared))
	}
	a.Labels["changed"] = "by a reader"
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "b"}, &b); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(b.Labels, labels) {
		t.Errorf("a reader changed its copy of a, and b's labels are %v, want %v", b.Labels, labels)
	}
}

// An object the cache holds as unstructured content loses its managed
// fields and nothing else; a tombstone passes as it is.
func TestLeanCacheTakesUnstructuredObjectsAndTombstones(t *testing.T) {
	transform := leanCacheOptions(t, cache.Options{}).DefaultTransform
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("ns")
	u.SetName("cm")
	u.SetLabels(map[string]string{"team": "blue"})
	u.SetManagedFields(managed)
	want := u.DeepCopy()
	want.SetManagedFields(nil)
	if _, err := transform(u); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, u); diff != "" {
		t.Errorf("-want +got:\n%s", diff)
	}
	tombstone := toolscache.DeletedFinalStateUnknown{Key: "ns/cm", Obj: u}
	if out, err := transform(tombstone); err != nil || out != tombstone {
		t.Errorf("a tombstone came out as %v, %v", out, err)
	}
}

// What the lean cache's transform costs on a Gadget whose status kfsm
// has written, as an informer decodes it anew for each event.
func BenchmarkLeanCacheTransform(b *testing.B) {
	transform := leanCacheOptions(b, cache.Options{}).DefaultTransform
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", ManagedFields: managed}}
	g.Status.State = "Serving"
	for _, c := range []string{fsm.ConditionReady, fsm.ConditionReconciling, fsm.ConditionStalled, "Config", "Expose", "Serving"} {
		g.Status.Conditions = append(g.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Serving"})
	}
	for range 3 {
		g.Status.History = append(g.Status.History, fsm.Transition{From: "Config", To: "Expose", Reason: "Next"})
	}
	g.Status.Outputs = []fsm.OutputRef{{Kind: "ConfigMap", Namespace: "ns", Name: "g"}, {Kind: "Service", Namespace: "ns", Name: "g"}}
	// After its first pass a copy has no managed fields left to drop, and
	// its strings are shared: the lookups are what is left to measure.
	copies := make([]*v1alpha1.Gadget, 1024)
	for i := range copies {
		copies[i] = g.DeepCopy()
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := transform(copies[i%len(copies)]); err != nil {
			b.Fatal(err)
		}
	}
}

// countingMapper counts the mappings asked of it, by kind.
type countingMapper struct {
	meta.RESTMapper
	mu    sync.Mutex
	asked map[schema.GroupKind]int
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.mu.Lock()
	m.asked[gk]++
	m.mu.Unlock()
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// mapperOf is a counting mapper of the API server of cfg, and the HTTP
// client it uses.
func mapperOf(t *testing.T, cfg *rest.Config) (*countingMapper, *http.Client) {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dynamic, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	return &countingMapper{RESTMapper: dynamic, asked: map[schema.GroupKind]int{}}, httpClient
}

// A cache of some namespaces looks up the REST mapping of an object's
// kind on every read; the lean cache looks it up once.
func TestLeanCacheLooksUpAKindsMappingOnce(t *testing.T) {
	fe := fsmtest.New(t)
	cfg := fe.Config()
	mapper, httpClient := mapperOf(t, cfg)
	opts := manager.Options{}
	fsm.LeanCache(&opts)
	c, err := opts.NewCache(cfg, cache.Options{
		HTTPClient: httpClient, Scheme: fe.Scheme, Mapper: mapper,
		DefaultNamespaces: map[string]cache.Config{fe.Namespace: {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = c.Start(ctx) }()
	fe.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "read", Namespace: fe.Namespace}})
	key := client.ObjectKey{Namespace: fe.Namespace, Name: "read"}
	for i := 0; i < 20; {
		err := c.Get(ctx, key, &corev1.ConfigMap{})
		switch {
		case err == nil:
			i++
		case apierrors.IsNotFound(err):
			time.Sleep(10 * time.Millisecond) // not in the cache yet
		default:
			t.Fatal(err)
		}
	}
	mapper.mu.Lock()
	defer mapper.mu.Unlock()
	if asked := mapper.asked[schema.GroupKind{Kind: "ConfigMap"}]; asked > 2 {
		t.Fatalf("20 reads of a ConfigMap from the cache asked the mapper %d times for its mapping, want one (and one for the informer)", asked)
	}
}

// The manager's client looks up the REST mapping of an object's kind for
// each write of its metadata alone, as kfsm's status writes are; with the
// lean cache it looks it up once.
func TestLeanCacheClientLooksUpAKindsMappingOnce(t *testing.T) {
	fe := fsmtest.New(t)
	cfg := fe.Config()
	mapper, httpClient := mapperOf(t, cfg)
	opts := manager.Options{}
	fsm.LeanCache(&opts)
	c, err := opts.NewClient(cfg, client.Options{HTTPClient: httpClient, Scheme: fe.Scheme, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	fe.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written", Namespace: fe.Namespace}})
	for i := range 20 {
		obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "written", Namespace: fe.Namespace}}
		obj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"write":"%d"}}}`, i))
		if err := c.Patch(t.Context(), obj, patch); err != nil {
			t.Fatal(err)
		}
	}
	mapper.mu.Lock()
	defer mapper.mu.Unlock()
	if asked := mapper.asked[schema.GroupKind{Kind: "ConfigMap"}]; asked != 1 {
		t.Fatalf("20 writes of a ConfigMap's metadata asked the mapper %d times for its mapping, want one", asked)
	}
}
