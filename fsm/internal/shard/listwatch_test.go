package shard

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// cmAt is a child's ConfigMap in slot 0.
func cmAt(name, uid, rv string) *corev1.ConfigMap {
	return inSlot(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), ResourceVersion: rv}}, 0)
}

// newReselecting returns the list and watch of an informer that holds
// held, over a server that lists listed (whatever the selection; with
// listed nil, it refuses every list at an exact resourceVersion as too
// old) and whose watches are servers, one after the other. The lists
// asked for are in lists: the resourceVersion, how it matches, and the
// slots.
func newReselecting(t *testing.T, held, listed []*corev1.ConfigMap, servers ...apiwatch.Interface) (l *reselecting, s *Replica, lists *[]string) {
	t.Helper()
	s = &Replica{changed: make(chan struct{})}
	s.resources = []*Resource{NewResource(corev1.SchemeGroupVersion.WithKind("ConfigMap"), "configmaps", true)}
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
	var from, asked []string
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			slots, _ := ctx.Value(selectionKey{}).(Slots)
			asked = append(asked, opts.ResourceVersion+" "+string(opts.ResourceVersionMatch)+" "+slots.String())
			if listed == nil && opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
				return nil, apierrors.NewResourceExpired("too old resource version: 3 (9)")
			}
			return list, nil
		},
		WatchFuncWithContext: func(_ context.Context, opts metav1.ListOptions) (apiwatch.Interface, error) {
			from = append(from, opts.ResourceVersion)
			if len(from) > len(servers) {
				return nil, fmt.Errorf("watch %d asked of a server of %d", len(from), len(servers))
			}
			return servers[len(from)-1], nil
		},
	}
	l = &reselecting{inner: lw, s: s, gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), example: &corev1.ConfigMap{}, store: store}
	s.lists = []*reselecting{l}
	t.Cleanup(func() {
		if diff := cmp.Diff([]string{"3", "3"}[:len(servers)], from); diff != "" && !t.Failed() {
			t.Errorf("the watches began at these resourceVersions (-want +got):\n%s", diff)
		}
	})
	return l, s, &asked
}

// received reads what w sends until it ends, or up to n events, and
// files them in the store as an informer does.
func received(t *testing.T, w apiwatch.Interface, store toolscache.Store, n int) []string {
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
			var err error
			switch ev.Type {
			case apiwatch.Added, apiwatch.Modified:
				err = store.Update(cm)
			case apiwatch.Deleted:
				err = store.Delete(cm)
			}
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event after %v", out)
		}
	}
	return out
}

// When the slots change, the watch ends with a bookmark, and the next
// sends what differs between the informer's store and a list of the
// slots added alone, at the resourceVersion the informer is at, then
// what the server sends from there on.
func TestReselectingSendsWhatDiffers(t *testing.T) {
	server := apiwatch.NewFake()
	l, s, lists := newReselecting(t,
		[]*corev1.ConfigMap{cmAt("same", "1", "1"), cmAt("changed", "2", "2"), cmAt("gone", "3", "3"), cmAt("new-uid", "4", "4")},
		[]*corev1.ConfigMap{cmAt("same", "1", "1"), cmAt("changed", "2", "5"), cmAt("added", "6", "6"), cmAt("new-uid", "7", "4")},
		apiwatch.NewFake(), server)

	before, err := l.watch(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	s.setSelector(1)
	if diff := cmp.Diff([]string{"BOOKMARK @3"}, received(t, before, l.store, 2)); diff != "" {
		t.Errorf("the watch open when the slots changed (-want +got):\n%s", diff)
	}

	after, err := l.watch(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Stop()
	go server.Modify(cmAt("same", "1", "10"))
	got := received(t, after, l.store, 6)
	if len(got) < 4 {
		t.Fatalf("the watch after the slots changed sent %v, want the differences and more", got)
	}
	differences := slices.Sorted(slices.Values(got[:4]))
	if diff := cmp.Diff([]string{"ADDED added@6", "DELETED gone@3", "MODIFIED changed@5", "MODIFIED new-uid@4"}, differences); diff != "" {
		t.Errorf("the differences (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"BOOKMARK @3", "MODIFIED same@10"}, got[4:]); diff != "" {
		t.Errorf("after the differences (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"3 Exact 0"}, *lists); diff != "" {
		t.Errorf("the lists asked for (-want +got):\n%s", diff)
	}
}

// Slots that the cache no longer selects go from the informer's store
// without a list, and those it keeps send nothing.
func TestReselectingLetsSlotsGoWithoutAList(t *testing.T) {
	l, s, lists := newReselecting(t,
		[]*corev1.ConfigMap{cmAt("kept", "1", "1"), inSlot(cmAt("let-go", "2", "2"), 1)},
		[]*corev1.ConfigMap{cmAt("kept", "1", "1")},
		apiwatch.NewFake(), apiwatch.NewFake())
	l.slots.Store(0b11)
	s.selected = 0b11
	after := reselected(t, l, s, 0b01)
	if diff := cmp.Diff([]string{"DELETED let-go@2", "BOOKMARK @3"}, received(t, after, l.store, 2)); diff != "" {
		t.Errorf("the watch after a slot was let go (-want +got):\n%s", diff)
	}
	if len(*lists) > 0 {
		t.Errorf("letting a slot go listed %v", *lists)
	}
}

// A list of the slots added that the API server can no longer serve at
// the informer's resourceVersion (etcd compacted it since) fails the
// watch and sends nothing, and the cache does not hold the new slots:
// the reflector lists every selected slot then, and the cache holds them
// once it has.
func TestReselectingFailsTheWatchIfTheSlotsAddedCannotBeListed(t *testing.T) {
	l, s, lists := newReselecting(t, []*corev1.ConfigMap{cmAt("held", "1", "1")}, nil, apiwatch.NewFake())
	before, err := l.watch(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	s.setSelector(0b01)
	received(t, before, l.store, 2)
	gen, _, _ := s.selection()
	after, err := l.watch(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if !apierrors.IsResourceExpired(err) || after != nil {
		t.Fatalf("the watch of the slots added = %v, %v; want the API server's error that the resourceVersion is too old", after, err)
	}
	if s.cached(gen) || len(l.store.List()) != 1 {
		t.Errorf("after the failed watch, the cache holds the new slots (%t) or its store changed (%d objects)", s.cached(gen), len(l.store.List()))
	}
	if _, err := l.list(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if !s.cached(gen) {
		t.Error("after the reflector's list of every selected slot, the cache does not hold them")
	}
	if diff := cmp.Diff([]string{"3 Exact 0", "  0"}, *lists); diff != "" {
		t.Errorf("the lists asked for (-want +got):\n%s", diff)
	}
}

// inSlot labels a child's ConfigMap with its parent's slot.
func inSlot(cm *corev1.ConfigMap, slot int) *corev1.ConfigMap {
	cm.Labels = map[string]string{LabelSlot: strconv.Itoa(slot)}
	return cm
}

// reselected opens the watch of l, changes the slots to slots, and opens
// the watch that takes them in.
func reselected(t *testing.T, l *reselecting, s *Replica, slots Slots) apiwatch.Interface {
	t.Helper()
	before, err := l.watch(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	s.setSelector(slots)
	received(t, before, l.store, 2)
	after, err := l.watch(context.Background(), metav1.ListOptions{ResourceVersion: "3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(after.Stop)
	return after
}

// The cache holds new slots only once the informer has filed what the
// watch sent in its store, not as soon as the reflector received it: a
// slot is taken then, and its objects are listed from the cache.
func TestReselectingHoldsTheSlotsOnceTheStoreHasThem(t *testing.T) {
	l, s, _ := newReselecting(t,
		[]*corev1.ConfigMap{cmAt("gone", "3", "3")},
		[]*corev1.ConfigMap{cmAt("added", "6", "6")},
		apiwatch.NewFake(), apiwatch.NewFake())
	s.lists = []*reselecting{l}
	after := reselected(t, l, s, 1)
	gen, _, _ := s.selection()

	elsewhere := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	if diff := cmp.Diff([]string{"ADDED added@6", "BOOKMARK @3", "DELETED gone@3"}, slices.Sorted(slices.Values(received(t, after, elsewhere, 3)))); diff != "" {
		t.Fatalf("the differences (-want +got):\n%s", diff)
	}
	time.Sleep(50 * time.Millisecond)
	if s.cached(gen) {
		t.Fatal("the cache holds the new slots while the informer's store lacks what the watch sent")
	}
	if err := l.store.Add(cmAt("added", "6", "6")); err != nil {
		t.Fatal(err)
	}
	if err := l.store.Delete(cmAt("gone", "3", "3")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !s.awaitCache(ctx, gen) {
		t.Fatal("the cache did not hold the new slots once the informer's store had what the watch sent")
	}
}

// What the cache takes in of slots this replica does not reconcile is
// no news to the machines, which queue every object of a slot when they
// take it; what it takes in of its own slots, and any later version, is.
func TestTheCatchUpOfSlotsNotReconciledIsNoNews(t *testing.T) {
	listed := []*corev1.ConfigMap{inSlot(cmAt("theirs", "1", "5"), 5), inSlot(cmAt("ours", "2", "6"), 6)}
	l, s, _ := newReselecting(t, nil, listed, apiwatch.NewFake(), apiwatch.NewFake())
	s.lists = []*reselecting{l}
	s.active = 1 << 6
	received(t, reselected(t, l, s, 1<<5|1<<6), l.store, 2)

	configMaps := corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind()
	for _, c := range []struct {
		obj  *corev1.ConfigMap
		news bool
	}{
		{inSlot(cmAt("theirs", "1", "5"), 5), false},
		{inSlot(cmAt("theirs", "1", "7"), 5), true},
		{inSlot(cmAt("ours", "2", "6"), 6), true},
	} {
		if got := !s.caughtUp(configMaps, c.obj); got != c.news {
			t.Errorf("%s@%s in slot %s is news: %v, want %v", c.obj.Name, c.obj.ResourceVersion, c.obj.Labels[LabelSlot], got, c.news)
		}
	}
	var dropped []string
	filter := s.CatchUpFilter(func(client.Object) (schema.GroupKind, bool) { return configMaps, true },
		func(_ schema.GroupKind, obj client.Object) { dropped = append(dropped, obj.GetName()) })
	if filter.Create(event.CreateEvent{Object: listed[0]}) {
		t.Error("the filter let the catch-up of a slot not reconciled through")
	}
	if !filter.Create(event.CreateEvent{Object: listed[1]}) {
		t.Error("the filter dropped the catch-up of a slot that this replica reconciles")
	}
	// The watches that map an object to others still hear of it.
	if diff := cmp.Diff([]string{"theirs"}, dropped); diff != "" {
		t.Errorf("the events dropped handed on (-want +got):\n%s", diff)
	}
}
