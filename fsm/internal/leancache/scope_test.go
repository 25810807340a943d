package leancache_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm/internal/leancache"
)

// A scoped cache says which namespaces it watches of each kind: a kind's
// own in ByObject, else the default ones; none when it watches them all,
// for a cluster-scoped kind, or when it was not made scoped and cannot
// say.
func TestNamespacesAreThoseTheCacheWatches(t *testing.T) {
	configMaps := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	secrets := corev1.SchemeGroupVersion.WithKind("Secret")
	namespaces := corev1.SchemeGroupVersion.WithKind("Namespace")
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(configMaps, meta.RESTScopeNamespace)
	mapper.Add(secrets, meta.RESTScopeNamespace)
	mapper.Add(namespaces, meta.RESTScopeRoot)
	some := map[string]cache.Config{"b": {}, "a": {}}
	scoped := func(o cache.Options) cache.Cache {
		o.Scheme, o.Mapper = clientgoscheme.Scheme, mapper
		return leancache.Scoped(&informertest.FakeInformers{}, o)
	}
	for _, c := range []struct {
		name string
		c    cache.Cache
		want map[schema.GroupVersionKind][]string
	}{
		{"not scoped", &informertest.FakeInformers{}, map[schema.GroupVersionKind][]string{configMaps: nil}},
		{"every namespace", scoped(cache.Options{}), map[schema.GroupVersionKind][]string{configMaps: nil}},
		{"some", scoped(cache.Options{DefaultNamespaces: some}),
			map[schema.GroupVersionKind][]string{configMaps: {"a", "b"}, secrets: {"a", "b"}, namespaces: nil}},
		{"every namespace among some", scoped(cache.Options{DefaultNamespaces: map[string]cache.Config{metav1.NamespaceAll: {}, "a": {}}}),
			map[schema.GroupVersionKind][]string{configMaps: nil}},
		{"a kind's own", scoped(cache.Options{DefaultNamespaces: some, ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{"c": {}}}}}),
			map[schema.GroupVersionKind][]string{configMaps: {"a", "b"}, secrets: {"c"}}},
	} {
		for gvk, want := range c.want {
			if got := leancache.Namespaces(c.c, gvk); !slices.Equal(got, want) {
				t.Errorf("%s: the namespaces of %s are %q, want %q", c.name, gvk.Kind, got, want)
			}
		}
	}
}
