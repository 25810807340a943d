package fsm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

func cmAt(name, uid, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), ResourceVersion: rv}}
}

// newReselecting returns the list and watch of an informer that holds
// held, over a server that lists listed at resourceVersion 9 and whose
// watches are servers, one after the other.
func newReselecting(t *testing.T, held, listed []*corev1.ConfigMap, servers ...apiwatch.Interface) (*reselecting, *Shards) {
	t.Helper()
	s := &Shards{changed: make(chan struct{})}
	s.resources = []*shardedResource{newShardedResource(corev1.SchemeGroupVersion.WithKind("ConfigMap"), "configmaps", true)}
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	for _, cm := range held {
		if err := store.Add(cm); err != nil {
			t.Fatal(err)
		}
	}
	list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}}
	for _, cm := range listed {
		list.Items = append(list.Items, *cm)
	}
	var from []string
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		WatchFuncWithContext: func(_ context.Context, opts metav1.ListOptions) (apiwatch.Interface, error) {
			from = append(from, opts.ResourceVersion)
			return servers[len(from)-1], nil
		},
	}
	l := &reselecting{inner: lw, s: s, gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), example: &corev1.ConfigMap{}, store: store}
	t.Cleanup(func() {
		if diff := cmp.Diff([]string{"3", "9"}, from); diff != "" {
			t.Errorf("the watches began at these resourceVersions (-want +got):\n%s", diff)
		}
	})
	return l, s
}

// received reads what w sends until it ends, or up to n events.
func received(t *testing.T, w apiwatch.Interface, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			cm := ev.Object.(*corev1.ConfigMap)
			out = append(out, string(ev.Type)+" "+cm.Name+"@"+cm.ResourceVersion)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event after %v", out)
		}
	}
	return out
}

// When the slots change, the watch ends with a bookmark, and the next
// sends what differs between the informer's store and a list of the new
// slots, then what the server sends from the list on.
func TestReselectingSendsWhatDiffers(t *testing.T) {
	server := apiwatch.NewFake()
	l, s := newReselecting(t,
		[]*corev1.ConfigMap{cmAt("same", "1", "1"), cmAt("changed", "2", "2"), cmAt("gone", "3", "3"), cmAt("new-uid", "4", "4")},
		[]*corev1.ConfigMap{cmAt("same", "1", "1"), cmAt("changed", "2", "5"), cmAt("added", "6", "6"), cmAt("new-uid", "7", "4")},
		apiwatch.NewFake(), server)

	before, err := l.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	s.setSelector(1)
	if diff := cmp.Diff([]string{"BOOKMARK @3"}, received(t, before, 2)); diff != "" {
		t.Errorf("the watch open when the slots changed (-want +got):\n%s", diff)
	}

	after, err := l.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Stop()
	go server.Modify(cmAt("same", "1", "10"))
	got := received(t, after, 6)
	if len(got) < 4 {
		t.Fatalf("the watch after the slots changed sent %v, want the differences and more", got)
	}
	differences := slices.Sorted(slices.Values(got[:4]))
	if diff := cmp.Diff([]string{"ADDED added@6", "DELETED gone@3", "MODIFIED changed@5", "MODIFIED new-uid@4"}, differences); diff != "" {
		t.Errorf("the differences (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"BOOKMARK @9", "MODIFIED same@10"}, got[4:]); diff != "" {
		t.Errorf("after the differences (-want +got):\n%s", diff)
	}
}
