package fsm

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
)

func labeled(name string, uid types.UID) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if uid != "" {
		cm.Labels = map[string]string{LabelOwnerUID: string(uid), "other": "x"}
	}
	return cm
}

func TestChildIndexFollowsTheInformersEvents(t *testing.T) {
	x := newChildIndex()
	synced := false
	x.synced = func() bool { return synced }
	want := func(uid types.UID, names ...string) {
		t.Helper()
		got, ok := x.children(uid)
		if !ok {
			t.Fatalf("children(%s) not ok after the sync", uid)
		}
		var keys []types.NamespacedName
		for _, n := range names {
			keys = append(keys, types.NamespacedName{Namespace: "ns", Name: n})
		}
		if !slices.Equal(got, keys) {
			t.Errorf("children(%s) = %v, want %v", uid, got, keys)
		}
	}

	x.OnAdd(labeled("a", "p1"), true)
	if _, ok := x.children("p1"); ok {
		t.Error("children answered before the initial list reached the index")
	}
	synced = true
	x.OnAdd(labeled("b", "p1"), false)
	x.OnAdd(labeled("c", "p2"), false)
	x.OnAdd(labeled("plain", ""), false)
	x.OnAdd(labeled("a", "p1"), false) // seen again: filed once
	want("p1", "a", "b")
	want("p2", "c")
	want("")

	// A change that keeps the parent moves nothing; one that changes it
	// moves the child, and one that drops the label takes it out.
	x.OnUpdate(labeled("a", "p1"), labeled("a", "p1"))
	x.OnUpdate(labeled("b", "p1"), labeled("b", "p2"))
	x.OnUpdate(labeled("c", "p2"), labeled("c", ""))
	x.OnUpdate(labeled("plain", ""), labeled("plain", "p3"))
	want("p1", "a")
	want("p2", "b")
	want("p3", "plain")

	x.OnDelete(labeled("a", "p1"))
	x.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/b", Obj: labeled("b", "p2")})
	want("p1")
	want("p2")
	if len(x.byParent) != 1 {
		t.Errorf("the index keeps %d parents, want only p3's: %v", len(x.byParent), x.byParent)
	}

	// What children returns is the caller's.
	got, _ := x.children("p3")
	got[0].Name = "changed"
	want("p3", "plain")

	var none *childIndex
	if _, ok := none.children("p1"); ok {
		t.Error("no index answered")
	}
}
