package childindex

import (
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

var (
	configMaps = schema.GroupKind{Kind: "ConfigMap"}
	services   = schema.GroupKind{Kind: "Service"}
	widgets    = schema.GroupKind{Group: "example.com", Kind: "Widget"}
)

// The label of a child's parent UID: package fsm's LabelOwnerUID.
const LabelOwnerUID = "kfsm.dev/owner-uid"

// testIndex indexes ConfigMaps and Services; Widgets are unstructured,
// and package fsm leaves them out.
func testIndex(t *testing.T) (*Index, predicate.Predicate) {
	t.Helper()
	x := New(LabelOwnerUID, clientgoscheme.Scheme, []schema.GroupVersionKind{configMaps.WithVersion("v1"), services.WithVersion("v1")})
	return x, x.Filter()
}

func configMap(name string, parent types.UID, rv int) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: strconv.Itoa(rv)}}
	if parent != "" {
		cm.Labels = map[string]string{LabelOwnerUID: string(parent)}
	}
	return cm
}

func childrenOf(t *testing.T, x *Index, gk schema.GroupKind, parent types.UID) []string {
	t.Helper()
	keys, ok := x.Children(gk, parent)
	if !ok {
		t.Fatalf("the index does not hold %s", gk)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	slices.Sort(names)
	return names
}

// Every event passes the index's filter, which files it on the way.
func TestIndexFilesChildrenAndLetsEveryEventPass(t *testing.T) {
	x, f := testIndex(t)
	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(widgets.WithVersion("v1"))
	widget.SetLabels(map[string]string{LabelOwnerUID: "p"})
	for _, pass := range []bool{
		f.Create(event.CreateEvent{Object: widget}),
		f.Create(event.CreateEvent{Object: configMap("a", "p", 1)}),
		f.Create(event.CreateEvent{Object: configMap("b", "p", 2)}),
		f.Create(event.CreateEvent{Object: configMap("other", "q", 3)}),
		f.Create(event.CreateEvent{Object: configMap("unlabelled", "", 4)}),
		f.Create(event.CreateEvent{Object: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc", Labels: map[string]string{LabelOwnerUID: "p"}}}}),
		f.Create(event.CreateEvent{Object: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-owned", Labels: map[string]string{LabelOwnerUID: "p"}}}}),
		f.Update(event.UpdateEvent{ObjectOld: configMap("b", "p", 2), ObjectNew: configMap("b", "p", 5)}),
		f.Delete(event.DeleteEvent{Object: configMap("a", "p", 6)}),
	} {
		if !pass {
			t.Fatal("the index's filter dropped an event")
		}
	}
	if got := childrenOf(t, x, configMaps, "p"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("ConfigMaps of p = %v, want [b]", got)
	}
	if got := childrenOf(t, x, services, "p"); !slices.Equal(got, []string{"svc"}) {
		t.Errorf("Services of p = %v, want [svc]", got)
	}
	if got := childrenOf(t, x, configMaps, "q"); !slices.Equal(got, []string{"other"}) {
		t.Errorf("ConfigMaps of q = %v, want [other]", got)
	}
	if _, ok := x.Children(widgets, "p"); ok {
		t.Error("the index claims an unstructured type, which eachChild lists by label")
	}
}

// The two watches of a child's type file the same events, each in order
// but out of step: a watch that lags never undoes what the other filed
// from a later version. Here the child is deleted and made again under
// the same name, and then moved to another parent.
func TestIndexIsNotUndoneByAWatchThatLags(t *testing.T) {
	events := []func(predicate.Predicate){
		func(f predicate.Predicate) { f.Create(event.CreateEvent{Object: configMap("c", "p", 1)}) },
		func(f predicate.Predicate) { f.Delete(event.DeleteEvent{Object: configMap("c", "p", 2)}) },
		func(f predicate.Predicate) { f.Create(event.CreateEvent{Object: configMap("c", "p", 3)}) },
		func(f predicate.Predicate) {
			f.Update(event.UpdateEvent{ObjectOld: configMap("c", "p", 3), ObjectNew: configMap("c", "q", 4)})
		},
	}
	// Where the child is once the watch ahead has filed event i.
	parentAfter := []types.UID{"p", "", "p", "q"}
	for i := range events {
		x, _ := testIndex(t)
		ahead, behind := x.Filter(), x.Filter()
		for _, ev := range events[:i+1] {
			ev(ahead)
		}
		for j, ev := range events[:i+1] {
			ev(behind)
			// A lagging watch may file again, for a moment, a child that
			// has gone or moved (eachChild reads every entry from the
			// cache), but it must never lose one.
			if p := parentAfter[i]; p != "" && !slices.Contains(childrenOf(t, x, configMaps, p), "c") {
				t.Errorf("after event %d, and the lagging watch's copy of event %d: %s lost its child", i, j, p)
			}
		}
		// Once both are through, the index says exactly where it is.
		for _, parent := range []types.UID{"p", "q"} {
			got := childrenOf(t, x, configMaps, parent)
			if want := parent == parentAfter[i]; want != slices.Equal(got, []string{"c"}) || !want && len(got) > 0 {
				t.Errorf("after event %d on both watches: children of %s = %v", i, parent, got)
			}
		}
	}
}
