package fsm_test

import (
	"context"
	"encoding/json"
	"errors"
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

// A cache of some namespaces looks up the REST mapping of an object's
// kind on every read; the lean cache looks it up once.
func TestLeanCacheLooksUpAKindsMappingOnce(t *testing.T) {
	fe := fsmtest.New(t)
	cfg := fe.Config()
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dynamic, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	mapper := &countingMapper{RESTMapper: dynamic, asked: map[schema.GroupKind]int{}}
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
