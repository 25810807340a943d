package echo

import (
	"context"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestCatchUpGuardsTheObjectsTheCacheHasOlder(t *testing.T) {
	gvk := schema.GroupVersionKind{Group: "testing.kfsm.dev", Version: "v1alpha1", Kind: "Gadget"}
	var objs []runtime.Object
	// "elsewhere" is behind too, but in no slot that the catch-up asks
	// about.
	names := []string{"current", "behind", "unseen", "elsewhere"}
	for _, name := range names {
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		o.SetGroupVersionKind(gvk)
		objs = append(objs, o)
	}
	server := fake.NewClientBuilder().WithRuntimeObjects(objs...).Build()
	served := map[string]uint64{}
	for _, name := range names {
		o := &metav1.PartialObjectMetadata{}
		o.SetGroupVersionKind(gvk)
		if err := server.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, o); err != nil {
			t.Fatal(err)
		}
		served[name], _ = ResourceVersion(o)
	}
	cache := map[string]uint64{"current": served["current"], "behind": served["behind"] - 1, "elsewhere": served["elsewhere"] - 1}
	m := NewMarks(gvk.GroupKind())
	of := func(o metav1.Object) bool { return o.GetName() != "elsewhere" }
	cached := func(key types.NamespacedName) (uint64, bool) { rv, ok := cache[key.Name]; return rv, ok }
	// A cache of other namespaces than the objects' has none of them to
	// check.
	if behind, err := m.CatchUp(context.Background(), server, gvk.GroupKind(), gvk.GroupVersion().WithKind("GadgetList"), []string{"a", "b"}, of, cached); err != nil || behind != 0 {
		t.Fatalf("CatchUp of namespaces a and b = %d, %v; want none behind, since the objects are in ns", behind, err)
	}
	behind, err := m.CatchUp(context.Background(), server, gvk.GroupKind(), gvk.GroupVersion().WithKind("GadgetList"), []string{"a", "ns"}, of, cached)
	if err != nil || behind != 2 {
		t.Fatalf("CatchUp = %d, %v; want the 2 objects asked about that the cache has older or not at all", behind, err)
	}
	copyAt := func(name string, rv uint64) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: strconv.FormatUint(rv, 10)}}
		o.SetGroupVersionKind(gvk)
		return o
	}
	for name, rv := range cache {
		key := Key{GroupKind: gvk.GroupKind(), NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
		if stale := m.Stale(key, copyAt(name, rv)); stale != (name == "behind") {
			t.Errorf("%s's cached copy at %d: stale %v", name, rv, stale)
		}
		if m.Stale(key, copyAt(name, served[name])) {
			t.Errorf("%s's copy at the API server's version is stale", name)
		}
	}
}
