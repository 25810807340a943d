package echo

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// listPage bounds each page of CatchUp's list.
const listPage = 500

// CatchUp lists the objects of a kind in namespaces (all, if none) from
// the API server, by their metadata, and has the stale-cache guard wait,
// for each of those that of selects (all, if of is nil) whose cached copy
// (cached gives its version) is older, until the cache holds the API
// server's version. A process that becomes leader runs it before it acts,
// and a replica that takes shard slots before it reconciles their
// objects: its cache may lag behind the writes of the process that acted
// before, which the marks of its own writes know nothing of. It makes one list request per page
// and namespace, with opts, and none of any single object.
func (e *Marks) CatchUp(ctx context.Context, server client.Reader, gk schema.GroupKind, list schema.GroupVersionKind, namespaces []string, of func(metav1.Object) bool, cached func(types.NamespacedName) (uint64, bool), opts ...client.ListOption) (behind int, err error) {
	items := &metav1.PartialObjectMetadataList{}
	items.SetGroupVersionKind(list)
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		for more := true; more; more = items.Continue != "" {
			if err := server.List(ctx, items, append(opts, client.InNamespace(ns), client.Limit(listPage), client.Continue(items.Continue))...); err != nil {
				return behind, err
			}
			for i := range items.Items {
				item := &items.Items[i]
				if of != nil && !of(item) {
					continue
				}
				rv, ok := ResourceVersion(item)
				key := types.NamespacedName{Namespace: item.Namespace, Name: item.Name}
				if have, known := cached(key); ok && (!known || have < rv) {
					e.AtLeast(Key{GroupKind: gk, NamespacedName: key}, rv)
					behind++
				}
			}
		}
	}
	return behind, nil
}
