// Package echo tells kfsm's own writes apart from changes made by others,
// and keeps kfsm from acting on a copy of an object older than its own
// last write of it: the echo filter and the stale-cache guard of
// package fsm.
//
// Every write that kfsm makes to an object (the parent's finalizer and
// status, a child's apply or delete) comes back from the API server as a
// watch event. Such an event tells kfsm nothing new: the reconcile that
// wrote it saw the version it produced. If it triggered a reconcile, each
// write would schedule the next one, and backoffs, waits and refusals
// would collapse into a loop. So kfsm remembers the resourceVersions its
// writes made and drops the events that carry them; the next reconcile is
// the one kfsm scheduled. Events of any other version pass: a change by
// someone else reconciles at once. An apply that changed nothing made no
// version: the one it answered with is the last writer's, perhaps someone
// else's whose event is still to come.
//
// Nor is the event of a version that a reconcile has read already: the
// informer files a version in its cache before it hands its event on, and
// under load the event may wait there while a reconcile that another
// cause started (the queueing of a slot taken over, a child's change)
// reads the version and acts on it. So the newest version that a
// reconcile read of each object of the machine's own kind is kept too
// (see Read), until the object is forgotten, and an event of it or of an
// older one is dropped as an echo is.
//
// An event can arrive before the write that caused it has returned. While
// a write is in flight, events of the object are held; when the write
// returns, those of its version are dropped and any other means that
// someone else changed the object meanwhile, and the parent is queued
// again.
//
// A mark lasts only while it tells something that the cache and the
// status do not: while a write is in flight, until the cache holds the
// version of kfsm's last write, and while the last apply of a child is
// recorded nowhere else (see Recorded). Then it ends, so that kfsm's
// memory of its writes grows with the objects it is writing, not with all
// the objects it has written. What stays is small: for each object of
// the machine's own kind, the version of kfsm's last write, which the
// stale-cache guard keeps until the object is forgotten; for each child
// still at the version that kfsm's create left, that version. A watch of
// a kind may deliver each event more than once (Owns and the machine's
// own mapping both watch a child's kind), so the versions of an ended
// mark's writes are kept a while longer, in a bounded list of recent
// ones, for the copies still to come.
// It knows objects by their kind and key, and knows nothing of machines:
// the reconciler says which objects are whose (see Role), and marks each
// of its writes with Begin and Wrote or Deleted.
package echo

import (
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kfsm/kfsm/fsm/internal/wire"
)

// Marks are what kfsm remembers of its writes of each object: the
// resourceVersions they made, the writes in flight and the events held
// behind them, and what the last apply of a child sent. The zero value is
// not ready; make one with NewMarks.
type Marks struct {
	mu      sync.Mutex
	marks   map[markKey]*echoMark
	flights map[markKey]*flight   // writes in flight
	gone    map[markKey]types.UID // kfsm deleted the object with this UID
	kinds   map[schema.GroupKind]uint16
	// guarded numbers the kind whose objects the stale-cache guard keeps,
	// and guards holds, of each of them, the version of kfsm's last write
	// once its mark has ended, and the newest version a reconcile read.
	guarded uint16
	guards  map[markKey]guard
	// created holds the versions that kfsm's creates left, of children
	// that no write has changed since.
	created map[kindVersion]struct{}
	ended   recent // the versions that ended marks' writes made
}

// Key names an object: its kind and its namespace and name.
type Key struct {
	schema.GroupKind
	types.NamespacedName
}

// markKey is a Key with its kind numbered by kinds.
type markKey struct {
	kind uint16
	types.NamespacedName
}

type echoMark struct {
	own  [4]uint64 // resourceVersions that kfsm's latest writes returned
	last uint64    // the newest of them: the stale-cache guard
	// seen is the newest version that an event judged here carried, or a
	// read from the cache: the cache holds it or a later one. A watch of a
	// child's kind by Owns and by the machine's own mapping delivers each
	// event twice; a copy held behind a write after the first was judged
	// is no news.
	seen uint64
	// applied is what kfsm's last apply of a child sent, and the version
	// the API server answered with: the skip rule's memory, until the
	// status records it.
	applied Apply
	next    uint8 // where the next version goes in own
}

// flight is what kfsm knows of an object while it writes it.
type flight struct {
	writing int32 // writes in flight
	held    []heldEvent
}

// Apply is a digest of an apply's content and the resourceVersion of
// the child that it left; a zero version records nothing.
type Apply struct {
	Digest  wire.Digest
	Version uint64
}

// heldEvent is an event that arrived while a write was in flight.
type heldEvent struct {
	rv      uint64
	uid     types.UID
	deleted bool // the object is gone: its mark can go too
}

// guard is what stays of an object of the guarded kind: the version of
// kfsm's last write of it, which the stale-cache guard waits for, and the
// newest version that a reconcile read of it.
type guard struct{ write, read uint64 }

func (g guard) atLeast(write, read uint64) guard {
	return guard{max(g.write, write), max(g.read, read)}
}

// NewMarks returns marks of no write, whose stale-cache guard keeps the
// objects of kind guarded.
func NewMarks(guarded schema.GroupKind) *Marks {
	e := &Marks{
		marks: map[markKey]*echoMark{}, flights: map[markKey]*flight{},
		gone: map[markKey]types.UID{}, kinds: map[schema.GroupKind]uint16{},
		guards: map[markKey]guard{}, created: map[kindVersion]struct{}{},
	}
	e.guarded = e.key(Key{GroupKind: guarded}).kind
	return e
}

// recentWrites bounds the versions kept of ended marks' writes. The second
// copy of an event comes from another watch of the same informer, which
// runs a step behind the first at most by the events still queued for it.
const recentWrites = 1024

// recent is a bounded list of versions that kfsm's writes made, of
// objects whose marks have ended.
type recent struct {
	has  map[kindVersion]struct{}
	ring []kindVersion
	next int
}

type kindVersion struct {
	kind uint16
	rv   uint64
}

func (r *recent) add(v kindVersion) {
	if r.has == nil {
		r.has = make(map[kindVersion]struct{}, recentWrites)
		r.ring = make([]kindVersion, recentWrites)
	}
	if _, ok := r.has[v]; ok {
		return
	}
	delete(r.has, r.ring[r.next])
	r.ring[r.next] = v
	r.has[v] = struct{}{}
	r.next = (r.next + 1) % recentWrites
}

func (r *recent) contains(v kindVersion) bool {
	_, ok := r.has[v]
	return ok
}

// key numbers key's kind; e.mu is held.
func (e *Marks) key(key Key) markKey {
	n, ok := e.kinds[key.GroupKind]
	if !ok {
		n = uint16(len(e.kinds))
		e.kinds[key.GroupKind] = n
	}
	return markKey{kind: n, NamespacedName: key.NamespacedName}
}

// KeyOf is the key of obj, of kind gk.
func KeyOf(gk schema.GroupKind, obj client.Object) Key {
	return Key{GroupKind: gk, NamespacedName: client.ObjectKeyFromObject(obj)}
}

// ResourceVersion reads an object's resourceVersion as the number that
// etcd's revisions are; ok is false for anything else.
func ResourceVersion(obj client.Object) (uint64, bool) {
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	return rv, err == nil
}

// Begin marks a write of key as in flight. read is the copy of the
// object, from the cache, that the write answers, or nil: the cache held
// that version, so the reconcile that writes has seen it, and a copy of
// its event held behind the write (the second of two watches of a
// child's kind) is no news.
func (e *Marks) Begin(key Key, read client.Object) {
	rv, ok := uint64(0), false
	if read != nil {
		rv, ok = ResourceVersion(read)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	if m := e.mark(k); ok {
		m.seen = max(m.seen, rv)
	}
	f := e.flights[k]
	if f == nil {
		f = &flight{}
		e.flights[k] = f
	}
	f.writing++
}

// mark returns k's mark, made if there is none; e.mu is held.
func (e *Marks) mark(k markKey) *echoMark {
	m := e.marks[k]
	if m == nil {
		m = &echoMark{}
		e.marks[k] = m
	}
	return m
}

// drop ends k's mark and guard; e.mu is held.
func (e *Marks) drop(k markKey) {
	delete(e.marks, k)
	delete(e.gone, k)
	delete(e.guards, k)
}

// settle ends k's mark, m, once it tells nothing that the cache and the
// status do not: no write of the object is in flight, the cache holds
// kfsm's last write of it or a later version, and no apply of it waits
// for the status to record it. The stale-cache guard keeps the last
// version of an object of the guarded kind, and copies still to come of
// the writes' events are known by the versions kept in e.ended. e.mu is
// held.
func (e *Marks) settle(k markKey, m *echoMark) {
	if e.flights[k] != nil || m.seen < m.last || m.applied != (Apply{}) || e.gone[k] != "" {
		return
	}
	if k.kind == e.guarded {
		e.guards[k] = e.guards[k].atLeast(m.last, 0)
	}
	for _, rv := range m.own {
		if rv != 0 {
			e.ended.add(kindVersion{kind: k.kind, rv: rv})
		}
	}
	delete(e.marks, k)
}

// Wrote ends a write that made obj, or made nothing when obj is nil (it
// failed, or was an apply that changed nothing), and reports whether
// events held meanwhile came from someone else.
func (e *Marks) Wrote(key Key, obj client.Object) (missed bool) {
	if obj != nil {
		e.Made(key, obj)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	m := e.marks[k]
	if m == nil {
		return false
	}
	missed = e.release(k, m)
	if e.marks[k] == m {
		e.settle(k, m)
	}
	return missed
}

// Deleted ends a delete of key: when it went through, the object with uid
// is gone by kfsm's hand, and what its deletion sends is no news.
func (e *Marks) Deleted(key Key, uid types.UID, ok bool) (missed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	m := e.marks[k]
	if m == nil {
		return false
	}
	if ok && uid != "" {
		e.gone[k] = uid
	}
	return e.release(k, m)
}

// Made records obj's version as made by the write of key in flight, one
// of several requests that the write takes.
func (e *Marks) Made(key Key, obj client.Object) {
	rv, ok := ResourceVersion(obj)
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	if m := e.marks[k]; m != nil && ok {
		m.record(rv)
	}
	if ok && k.kind == e.guarded && !obj.GetDeletionTimestamp().IsZero() && len(obj.GetFinalizers()) == 0 {
		// The write took the last finalizer off: the API server deleted
		// the object and answered with the version before, which a cache
		// that lags still holds. The guard waits for a later version.
		e.guards[k] = e.guards[k].atLeast(rv+1, 0)
	}
}

// Applied records what an apply of key sent and the version it left;
// created says that it was sent as a create.
func (e *Marks) Applied(key Key, a Apply, created bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	if m := e.marks[k]; m != nil {
		m.applied = a
	}
	if created && a.Version != 0 {
		e.created[kindVersion{kind: k.kind, rv: a.Version}] = struct{}{}
	}
}

// Recorded says that the status records version rv of the child of key
// as made by an apply whose digest is digest (as Digest.String gives it):
// when that is what the mark remembers, the status stands in for it from
// now on, and the mark may end.
func (e *Marks) Recorded(key Key, digest, rv string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	m := e.marks[k]
	if m == nil || m.applied == (Apply{}) || m.applied.Digest.String() != digest || strconv.FormatUint(m.applied.Version, 10) != rv {
		return
	}
	m.applied = Apply{}
	e.settle(k, m)
}

// Created returns obj's resourceVersion if obj, a copy of the object of
// key, is still the version that kfsm's create left; "" otherwise. The
// fields the create set are then kfsm's update until an apply moves them
// (see package ownership).
func (e *Marks) Created(key Key, obj client.Object) string {
	if obj == nil {
		return ""
	}
	rv, ok := ResourceVersion(obj)
	if !ok {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.created[kindVersion{kind: e.key(key).kind, rv: rv}]; ok {
		return obj.GetResourceVersion()
	}
	return ""
}

// LastApplied returns what Applied last recorded for key, if anything.
func (e *Marks) LastApplied(key Key) (Apply, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.marks[e.key(key)]
	if m == nil || m.applied.Version == 0 {
		return Apply{}, false
	}
	return m.applied, true
}

func (m *echoMark) record(rv uint64) {
	m.own[m.next] = rv
	m.next = (m.next + 1) % uint8(len(m.own))
	m.last = max(m.last, rv)
}

// ours reports whether ev is the echo of a write of k's, whose mark is m,
// or of an ended mark's write; e.mu is held.
func (e *Marks) ours(k markKey, m *echoMark, ev heldEvent) bool {
	if gone, ok := e.gone[k]; ok && ev.uid == gone {
		return true
	}
	return ev.rv != 0 && (slices.Contains(m.own[:], ev.rv) || e.ended.contains(kindVersion{kind: k.kind, rv: ev.rv}))
}

// release ends one write in flight and judges the events held meanwhile.
// e.mu is held.
func (e *Marks) release(k markKey, m *echoMark) (missed bool) {
	f := e.flights[k]
	if f == nil {
		return false
	}
	if f.writing--; f.writing > 0 {
		return false
	}
	delete(e.flights, k)
	gone := false
	for _, ev := range f.held {
		missed = missed || (!e.ours(k, m, ev) && (ev.rv == 0 || ev.rv > m.seen))
		m.seen = max(m.seen, ev.rv)
		gone = gone || ev.deleted
	}
	if gone {
		e.drop(k)
	}
	return missed
}

// echo reports whether an event about obj is one of kfsm's own writes, or
// must wait for the write in flight to return. A delete event ends the
// object's mark.
func (e *Marks) echo(key Key, obj client.Object, deleted bool) bool {
	rv, _ := ResourceVersion(obj)
	ev := heldEvent{rv: rv, uid: obj.GetUID(), deleted: deleted}
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	if !deleted && ev.rv != 0 && ev.rv <= e.guards[k].read {
		return true // a reconcile read this version or a later one
	}
	m := e.marks[k]
	if m == nil {
		// A copy, from another watch, of an event of an ended mark's
		// write; or else news.
		return !deleted && ev.rv != 0 && e.ended.contains(kindVersion{kind: k.kind, rv: ev.rv})
	}
	if f := e.flights[k]; f != nil {
		f.held = append(f.held, ev)
		return true
	}
	ours := e.ours(k, m, ev)
	m.seen = max(m.seen, ev.rv)
	switch {
	case deleted:
		e.drop(k)
	case ours:
		e.settle(k, m)
	}
	return ours
}

// Stale reports whether obj, read from the cache, is older than kfsm's
// last write of it. The guard keeps that version until the object is
// forgotten, so that no older copy, read at any time, is mistaken for the
// present; a copy that is not older tells that the cache has caught up,
// and the rest of the mark may end.
func (e *Marks) Stale(key Key, obj client.Object) bool {
	rv, ok := ResourceVersion(obj)
	if !ok {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	m := e.marks[k]
	if rv < e.guards[k].write || (m != nil && rv < m.last) {
		return true
	}
	if m == nil {
		return false
	}
	m.seen = max(m.seen, rv)
	e.settle(k, m)
	return false
}

// Read notes that a reconcile read obj, an object of the guarded kind,
// from the cache. The informer files a version before it hands on its
// event, so the event may come after a reconcile that another cause
// started has read that version: the event is then no news, and is
// dropped as an echo is.
func (e *Marks) Read(key Key, obj client.Object) {
	rv, _ := ResourceVersion(obj)
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	e.guards[k] = e.guards[k].atLeast(0, rv)
}

// AtLeast makes the stale-cache guard wait until the cache has seen
// version rv of the object.
func (e *Marks) AtLeast(key Key, rv uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	e.guards[k] = e.guards[k].atLeast(rv, 0)
}

// Forget ends the mark of an object that kfsm no longer reconciles,
// unless a write of it is in flight.
func (e *Marks) Forget(key Key) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := e.key(key)
	if e.flights[k] == nil {
		e.drop(k)
	}
}

// Role says what an object is to a machine: its own kind (a parent), a
// kind of its children, or neither.
type Role int

const (
	Other  Role = iota // not the machine's: its events pass as they are
	Parent             // an object of the machine's own kind
	Child              // an object of a kind the machine owns
)

// Filter is the predicate that drops the events of kfsm's own writes from
// every watch of a machine, and tells dropped what it dropped; roleOf
// tells parents and children from the rest. Resyncs (same
// resourceVersion) pass, and so do deletes by others; a child's mark
// ends with its deletion, a parent's guard when the reconciler forgets
// it.
func (e *Marks) Filter(roleOf func(client.Object) (schema.GroupKind, Role), dropped func(schema.GroupKind, client.Object)) predicate.Predicate {
	echo := func(old, obj client.Object, deleted bool) bool {
		gk, r := roleOf(obj)
		switch {
		case r != Child:
		case deleted:
			e.left(gk, obj)
		case old != nil:
			e.left(gk, old)
		}
		switch {
		case r == Other, r == Parent && deleted:
			return false
		}
		if !e.echo(KeyOf(gk, obj), obj, deleted) {
			return false
		}
		dropped(gk, obj)
		return true
	}
	return predicate.Funcs{
		CreateFunc: func(ev event.CreateEvent) bool { return !echo(nil, ev.Object, false) },
		UpdateFunc: func(ev event.UpdateEvent) bool {
			return ev.ObjectOld.GetResourceVersion() == ev.ObjectNew.GetResourceVersion() || !echo(ev.ObjectOld, ev.ObjectNew, false)
		},
		DeleteFunc: func(ev event.DeleteEvent) bool { return !echo(nil, ev.Object, true) },
	}
}

// left forgets the version that kfsm's create left of a child of kind
// gk if it is was's: the version that an update or the deletion of the
// child moved it off.
func (e *Marks) left(gk schema.GroupKind, was client.Object) {
	rv, ok := ResourceVersion(was)
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.created) > 0 {
		delete(e.created, kindVersion{kind: e.key(Key{GroupKind: gk}).kind, rv: rv})
	}
}
