package shard

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// reselecting is the list and watch of one of the cache's informers. For
// a resource of a sharded machine, it moves the informer to the objects
// of the replica's new slots without a list by the informer: client-go's
// reflector waits before each list it makes after the first, 0.8 s and
// twice as long each time (up to 30 s, and up to twice that with jitter)
// until two minutes pass, so a cache that listed again at each change of
// the slots held the slots it took only tens of seconds later once a few
// hand-overs came in a row.
//
// So when the slots change, the open watch ends as a server ends one,
// and the reflector watches again at once. That watch first sends, as
// watch events, what takes the informer's store to the new slots: the
// deletion of the objects of the slots it no longer selects, and the
// objects of the slots it now selects, as a list of those slots alone
// gives them at the resourceVersion the informer is at; then it watches
// every selected slot on from there. An object of a slot it kept sends
// nothing, and reconciles nothing.
type reselecting struct {
	inner   toolscache.ListerWatcherWithContext
	s       *Replica
	gvk     schema.GroupVersionKind
	example runtime.Object   // an empty object of the informer's type
	store   toolscache.Store // the informer's, set once it is made
	// held is the generation of the selection that the informer holds,
	// or is sent by a watch open now, and slots are its slots.
	held  atomic.Uint64
	slots atomic.Uint64
	// catchUp is what the last differences sent of slots that this
	// replica did not reconcile then: name and resourceVersion. Those
	// events are no news to the machines: taking a slot queues every
	// object of it once the cache holds them (see caughtUp).
	catchUp atomic.Pointer[map[types.NamespacedName]string]
}

// selectionKey is the context key of the slots that a list or watch
// selects; the cache's transport applies them.
type selectionKey struct{}

// reselect wraps the list and watch of an informer of objects like
// example (of gvk), which newInformer makes.
func (s *Replica) reselect(lw toolscache.ListerWatcher, example runtime.Object, gvk schema.GroupVersionKind, newInformer func(toolscache.ListerWatcher) toolscache.SharedIndexInformer) toolscache.SharedIndexInformer {
	l := &reselecting{inner: toolscache.ToListerWatcherWithContext(lw), s: s, gvk: gvk, example: example}
	inf := newInformer(&toolscache.ListWatch{ListWithContextFunc: l.list, WatchFuncWithContext: l.watch})
	l.store = inf.GetStore()
	s.mu.Lock()
	s.lists = append(s.lists, l)
	s.mu.Unlock()
	return inf
}

// cached reports whether every informer of a sharded resource holds the
// objects of the selection of generation gen, or a later one.
func (s *Replica) cached(gen uint64) bool {
	s.mu.Lock()
	lists := slices.Clone(s.lists)
	s.mu.Unlock()
	for _, l := range lists {
		if selects, _, _ := l.kind(); l.held.Load() < gen && selects {
			return false
		}
	}
	return true
}

// kind reports whether the informer lists a sharded resource that the
// API server selects (the selection does not matter to another, nor to
// one whose shard selectors the server ignores), and whether it lists a
// machine's children; and it returns the slots whose objects the replica
// reconciles now.
func (l *reselecting) kind() (selects, children bool, active Slots) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	for _, r := range l.s.resources {
		if r.gvk == l.gvk {
			return r.support != ignored, r.children, l.s.active
		}
	}
	return false, false, l.s.active
}

func (l *reselecting) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	gen, selected, _ := l.s.selection()
	list, err := l.inner.ListWithContext(context.WithValue(ctx, selectionKey{}, selected), opts)
	if err == nil {
		l.held.Store(gen)
		l.slots.Store(uint64(selected))
	}
	return list, err
}

func (l *reselecting) watch(ctx context.Context, opts metav1.ListOptions) (apiwatch.Interface, error) {
	if selects, _, _ := l.kind(); !selects {
		return l.inner.WatchWithContext(ctx, opts)
	}
	gen, selected, changed := l.s.selection()
	ctx = context.WithValue(ctx, selectionKey{}, selected)
	var first []apiwatch.Event
	switch {
	case ptr.Deref(opts.SendInitialEvents, false):
		// A list by watch: it sends every selected object.
	case l.held.Load() != gen:
		var err error
		if first, err = l.differences(ctx, opts.ResourceVersion, selected); err != nil {
			return nil, err
		}
	}
	w, err := l.inner.WatchWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := &cutWatch{of: l, gen: gen, slots: selected, inner: w, events: make(chan apiwatch.Event), rv: opts.ResourceVersion}
	out.stopped, out.cancel = context.WithCancel(context.Background())
	go out.run(first, changed)
	return out, nil
}

// differences returns the watch events that take the informer's store
// from the slots it holds to selected, as they were at resourceVersion
// rv, ending with a bookmark of rv: the deletion of the objects of the
// slots left, and what differs in a list of the slots added alone at rv
// (the API server serves it from its cache's snapshots, or from etcd).
// If rv is too old for that, or none, the reflector lists every selected
// slot.
func (l *reselecting) differences(ctx context.Context, rv string, selected Slots) ([]apiwatch.Event, error) {
	was := Slots(l.slots.Load())
	added, left := selected&^was, was&^selected
	_, children, active := l.kind()
	var events []apiwatch.Event
	gone := func(o any) {
		// A copy: the informer's transform may change what it is given.
		if o, ok := o.(runtime.Object); ok {
			events = append(events, apiwatch.Event{Type: apiwatch.Deleted, Object: o.DeepCopyObject()})
		}
	}
	held := map[string]metav1.Object{}
	for _, o := range l.store.List() {
		m, err := meta.Accessor(o)
		if err != nil {
			continue
		}
		switch slot, ok := slotOf(m, children); {
		case ok && left.Has(slot):
			gone(o)
		case ok && added.Has(slot):
			held[m.GetNamespace()+"/"+m.GetName()] = m
		}
	}
	catchUp := map[types.NamespacedName]string{}
	if added != 0 {
		list, err := l.inner.ListWithContext(context.WithValue(ctx, selectionKey{}, added), metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			m, err := meta.Accessor(item)
			if err != nil {
				continue
			}
			slot, ok := slotOf(m, children)
			if !ok || !added.Has(slot) {
				continue // a server that ignores the selector sends them
			}
			key := m.GetNamespace() + "/" + m.GetName()
			old, ok := held[key]
			delete(held, key)
			switch {
			case !ok:
				events = append(events, apiwatch.Event{Type: apiwatch.Added, Object: item})
			case old.GetUID() != m.GetUID() || old.GetResourceVersion() != m.GetResourceVersion():
				events = append(events, apiwatch.Event{Type: apiwatch.Modified, Object: item})
			default:
				continue
			}
			if !active.Has(slot) {
				catchUp[types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}] = m.GetResourceVersion()
			}
		}
	}
	l.catchUp.Store(&catchUp)
	for _, old := range held {
		gone(old)
	}
	return append(events, l.bookmark(rv)), nil
}

// bookmark is a bookmark event of resourceVersion rv.
func (l *reselecting) bookmark(rv string) apiwatch.Event {
	o := l.example.DeepCopyObject()
	if m, err := meta.Accessor(o); err == nil {
		m.SetResourceVersion(rv)
	}
	return apiwatch.Event{Type: apiwatch.Bookmark, Object: o}
}

// cutWatch sends first events, then those of inner, until the selection
// changes: then it ends with a bookmark of the last resourceVersion it
// sent, so that the reflector, which takes a watch that ends without an
// event within a second for a failure, watches again at once.
type cutWatch struct {
	of     *reselecting
	gen    uint64 // of the selection it sends
	slots  Slots  // that selection
	inner  apiwatch.Interface
	events chan apiwatch.Event
	// stopped ends when Stop is called.
	stopped context.Context
	cancel  context.CancelFunc
	rv      string // of the last event sent; the run's alone
}

func (w *cutWatch) ResultChan() <-chan apiwatch.Event { return w.events }

func (w *cutWatch) Stop() { w.cancel() }

// run sends first, after which the informer holds the selection, and
// forwards inner's events until inner ends, the watch is stopped or
// changed closes.
func (w *cutWatch) run(first []apiwatch.Event, changed <-chan struct{}) {
	defer close(w.events)
	defer w.inner.Stop()
	for _, ev := range first {
		if !w.send(ev) {
			return
		}
	}
	if !w.settled(first) {
		return
	}
	w.of.slots.Store(uint64(w.slots))
	w.of.held.Store(w.gen)
	for {
		select {
		case ev, ok := <-w.inner.ResultChan():
			if !ok || !w.send(ev) {
				return
			}
		case <-changed:
			if w.rv != "" {
				w.send(w.of.bookmark(w.rv))
			}
			return
		case <-w.stopped.Done():
			return
		}
	}
}

// settled waits until the informer's store holds what first sent: the
// reflector has received the events, but the informer files them in its
// store a moment later, and a slot is taken only once the cache holds its
// objects. It reports false if the watch was stopped first.
func (w *cutWatch) settled(first []apiwatch.Event) bool {
	holds := func(context.Context) (bool, error) { return w.of.holds(first), nil }
	return wait.PollUntilContextCancel(w.stopped, 5*time.Millisecond, true, holds) == nil
}

// holds reports whether the informer's store is as events leave it.
func (l *reselecting) holds(events []apiwatch.Event) bool {
	for _, ev := range events {
		key, err := toolscache.MetaNamespaceKeyFunc(ev.Object)
		if ev.Type == apiwatch.Bookmark || err != nil {
			continue
		}
		obj, ok, err := l.store.GetByKey(key)
		got, _ := meta.Accessor(obj)
		want, _ := meta.Accessor(ev.Object)
		switch deleted := ev.Type == apiwatch.Deleted; {
		case err != nil, deleted && ok:
			return false
		case !deleted && (!ok || got == nil || got.GetResourceVersion() != want.GetResourceVersion()):
			return false
		}
	}
	return true
}

// slotOf returns the hash slot of an object: a child's is in its label,
// a machine's object's is its UID's.
func slotOf(m metav1.Object, children bool) (int, bool) {
	if !children {
		return SlotOf(m.GetUID()), true
	}
	slot, err := strconv.Atoi(m.GetLabels()[LabelSlot])
	return slot, err == nil && slot >= 0 && slot < NumSlots
}

// caughtUp reports whether obj, of kind gk, is as the last differences of
// its informer sent it for a slot that this replica did not reconcile
// then.
func (s *Replica) caughtUp(gk schema.GroupKind, obj client.Object) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lists {
		if l.gvk.GroupKind() != gk {
			continue
		}
		if sent := l.catchUp.Load(); sent != nil {
			if rv, ok := (*sent)[client.ObjectKeyFromObject(obj)]; ok && rv == obj.GetResourceVersion() {
				return true
			}
		}
	}
	return false
}

// CatchUpFilter drops the events that the cache sends as it takes in the
// objects of slots this replica did not reconcile: when it takes such a
// slot, it queues each of them once (see Machine.Gained), and an event
// that came in while its first reconcile ran would only run the object
// again. kindOf tells the kind of the machine's objects and children, and
// false for others. Each event dropped goes to dropped: it is no news for
// the object, but it is for the other objects that a watch maps it to,
// which Gained does not queue.
func (s *Replica) CatchUpFilter(kindOf func(client.Object) (schema.GroupKind, bool), dropped func(schema.GroupKind, client.Object)) predicate.Predicate {
	news := func(obj client.Object) bool {
		gk, ours := kindOf(obj)
		if !ours || !s.caughtUp(gk, obj) {
			return true
		}
		dropped(gk, obj)
		return false
	}
	return predicate.Funcs{
		CreateFunc: func(ev event.CreateEvent) bool { return news(ev.Object) },
		UpdateFunc: func(ev event.UpdateEvent) bool { return news(ev.ObjectNew) },
	}
}

func (w *cutWatch) send(ev apiwatch.Event) bool {
	select {
	case w.events <- ev:
	case <-w.stopped.Done():
		return false
	}
	if ev.Type != apiwatch.Error {
		if m, err := meta.Accessor(ev.Object); err == nil {
			w.rv = m.GetResourceVersion()
		}
	}
	return true
}
