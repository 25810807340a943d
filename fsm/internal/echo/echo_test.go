package echo

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/kfsm/kfsm/fsm/internal/wire"
)

func version(rv string, uid types.UID) client.Object {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "o", ResourceVersion: rv, UID: uid}}
}

// The orders in which a write and its watch events can meet: an echo is
// dropped whether it comes before or after the write returns, and a
// change by someone else is never lost, even when it hides behind a
// write in flight.
func TestEchoesTellOwnWritesFromOthers(t *testing.T) {
	gk := schema.GroupKind{Group: "testing.kfsm.dev", Kind: "Gadget"}
	key := KeyOf(gk, version("", ""))
	type step struct {
		do   string // "begin [<rv> read]", "made <rv>", "wrote <rv>", "failed", "deleted", "read <rv>", "event <rv>", "delete-event"
		rv   string
		want bool // for events: dropped; for the end of a write: missed
	}
	cases := map[string]struct {
		reason string
		steps  []step
	}{
		"EchoAfterTheWrite": {
			reason: "the usual order: the write returns, then its event comes",
			steps:  []step{{do: "begin"}, {do: "wrote", rv: "10"}, {do: "event", rv: "10", want: true}},
		},
		"EchoBeforeTheWriteReturns": {
			reason: "the event races the write's answer: held, then dropped",
			steps:  []step{{do: "begin"}, {do: "event", rv: "10", want: true}, {do: "wrote", rv: "10", want: false}},
		},
		"ChangeHiddenBehindAWrite": {
			reason: "someone else's change arrives during the write: held, then reported missed",
			steps:  []step{{do: "begin"}, {do: "event", rv: "11", want: true}, {do: "wrote", rv: "10", want: true}},
		},
		"ChangeAfterTheWrite": {
			reason: "a later version is someone else's, and passes",
			steps:  []step{{do: "begin"}, {do: "wrote", rv: "10"}, {do: "event", rv: "12", want: false}},
		},
		"SecondCopyOfAChangeThatPassed": {
			reason: "Owns and the machine's own mapping watch a child's kind twice: the second copy of a change, held behind a write, is no news",
			steps:  []step{{do: "begin"}, {do: "wrote", rv: "10"}, {do: "event", rv: "12", want: false}, {do: "begin"}, {do: "event", rv: "12", want: true}, {do: "wrote", rv: "13", want: false}},
		},
		"SecondCopyOfAChangeAfterTheMarkEnded": {
			reason: "a change by someone else to an object whose mark has ended passes; the write that answers it, read from a cache that holds the change, holds its second copy, which is no news",
			steps:  []step{{do: "begin"}, {do: "wrote", rv: "10"}, {do: "event", rv: "10", want: true}, {do: "event", rv: "12", want: false}, {do: "begin", rv: "12"}, {do: "event", rv: "12", want: true}, {do: "wrote", rv: "13", want: false}},
		},
		"ChangeNewerThanTheWritesRead": {
			reason: "a change newer than the copy that the write was read from is news, even behind the write",
			steps:  []step{{do: "event", rv: "12", want: false}, {do: "begin", rv: "12"}, {do: "event", rv: "14", want: true}, {do: "wrote", rv: "13", want: true}},
		},
		"HeldCopyOfAnEndedMarksEcho": {
			reason: "the echo ended the mark; its second copy, from another watch, comes during the next write: still kfsm's",
			steps:  []step{{do: "begin"}, {do: "wrote", rv: "10"}, {do: "event", rv: "10", want: true}, {do: "begin"}, {do: "event", rv: "10", want: true}, {do: "wrote", rv: "11", want: false}},
		},
		"FailedWrite": {
			reason: "a write that failed produced nothing: whatever came meanwhile is news",
			steps:  []step{{do: "begin"}, {do: "event", rv: "11", want: true}, {do: "failed", want: true}},
		},
		"OlderWritesStayOurs": {
			reason: "the echo of the first of two writes, late, is still kfsm's",
			steps:  []step{{do: "begin"}, {do: "wrote", rv: "10"}, {do: "begin"}, {do: "wrote", rv: "11"}, {do: "event", rv: "10", want: true}, {do: "event", rv: "11", want: true}},
		},
		"OwnDelete": {
			reason: "what kfsm's own delete sends (an update with a deletion timestamp, the delete) is no news",
			steps:  []step{{do: "begin"}, {do: "wrote", rv: "10"}, {do: "begin"}, {do: "deleted"}, {do: "event", rv: "13", want: true}, {do: "delete-event", rv: "14", want: true}, {do: "event", rv: "15", want: false}},
		},
		"AWriteOfSeveralRequests": {
			reason: "a child's first apply, the move of its fields and the apply again: each version that it made is kfsm's",
			steps:  []step{{do: "begin"}, {do: "event", rv: "10", want: true}, {do: "made", rv: "10"}, {do: "made", rv: "11"}, {do: "wrote", rv: "12", want: false}, {do: "event", rv: "11", want: true}, {do: "event", rv: "12", want: true}},
		},
		"EventOfAVersionAReconcileRead": {
			reason: "a reconcile that another cause started read the version before its event came: the event, and those of older versions, are no news; a newer one is",
			steps:  []step{{do: "read", rv: "12"}, {do: "event", rv: "12", want: true}, {do: "event", rv: "11", want: true}, {do: "event", rv: "13", want: false}},
		},
		"EventOfAVersionReadBehindAWrite": {
			reason: "the event of the version that the reconcile read comes while its write is in flight: no news, and nothing missed",
			steps:  []step{{do: "read", rv: "12"}, {do: "begin"}, {do: "event", rv: "12", want: true}, {do: "wrote", rv: "13", want: false}},
		},
		"DeleteOfAVersionRead": {
			reason: "a delete is news whatever version was read",
			steps:  []step{{do: "read", rv: "12"}, {do: "delete-event", rv: "12", want: false}},
		},
		"NoWriteNoEcho": {
			reason: "an object kfsm never wrote has no echoes",
			steps:  []step{{do: "event", rv: "10", want: false}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := NewMarks(gk)
			for i, s := range tc.steps {
				var got bool
				switch s.do {
				case "begin":
					var read client.Object
					if s.rv != "" {
						read = version(s.rv, "u1")
					}
					e.Begin(key, read)
					continue
				case "wrote":
					got = e.Wrote(key, version(s.rv, "u1"))
				case "made":
					e.Made(key, version(s.rv, "u1"))
					continue
				case "read":
					e.Read(key, version(s.rv, "u1"))
					continue
				case "failed":
					got = e.Wrote(key, nil)
				case "deleted":
					got = e.Deleted(key, "u1", true)
				case "event":
					got = e.echo(key, version(s.rv, "u1"), false)
				case "delete-event":
					got = e.echo(key, version(s.rv, "u1"), true)
				}
				if got != s.want {
					t.Errorf("%s: step %d (%s %s) = %v, want %v", tc.reason, i+1, s.do, s.rv, got, s.want)
				}
			}
		})
	}
}

// The stale-cache guard keeps kfsm's last write until the object is
// forgotten, so no older copy passes, however often newer ones were read.
// The rest of the mark ends once the cache holds that write: the guard
// keeps one version per object.
func TestStaleGuardLastsUntilForgotten(t *testing.T) {
	gk := schema.GroupKind{Group: "testing.kfsm.dev", Kind: "Gadget"}
	key := KeyOf(gk, version("", ""))
	for name, caughtUp := range map[string]func(e *Marks){
		"ARead":     func(e *Marks) { e.Stale(key, version("20", "u1")) },
		"AnEcho":    func(e *Marks) { e.echo(key, version("20", "u1"), false) },
		"AHandover": func(e *Marks) { e.AtLeast(key, 20); e.Stale(key, version("20", "u1")) },
	} {
		t.Run(name, func(t *testing.T) {
			e := NewMarks(gk)
			e.Begin(key, nil)
			e.Wrote(key, version("20", "u1"))
			if !e.Stale(key, version("19", "u1")) {
				t.Fatal("a copy older than kfsm's write passed")
			}
			caughtUp(e)
			if len(e.marks) != 0 || len(e.guards) != 1 {
				t.Errorf("the cache holds kfsm's write: %d marks and %d guards, want none and 1", len(e.marks), len(e.guards))
			}
			for range 3 {
				if e.Stale(key, version("20", "u1")) {
					t.Fatal("the copy kfsm wrote is taken for stale")
				}
			}
			if !e.Stale(key, version("19", "u1")) {
				t.Error("a copy older than kfsm's write passed after fresh reads")
			}
			e.Forget(key)
			if e.Stale(key, version("19", "u1")) || len(e.guards) != 0 {
				t.Error("a forgotten object is still guarded")
			}
		})
	}
	t.Run("NotTheEchoOfAnOlderWrite", func(t *testing.T) {
		e := NewMarks(gk)
		for _, rv := range []string{"20", "21"} {
			e.Begin(key, nil)
			e.Wrote(key, version(rv, "u1"))
		}
		e.echo(key, version("20", "u1"), false)
		if !e.Stale(key, version("20", "u1")) || len(e.marks) != 1 {
			t.Error("after the echo of the first of two writes, a copy of it passed the guard")
		}
	})
	t.Run("TheCopyBeforeTheLastFinalizerWent", func(t *testing.T) {
		// The write that takes the last finalizer off answers with the
		// version before the deletion: the copy a lagging cache holds.
		e := NewMarks(gk)
		e.Begin(key, nil)
		e.Wrote(key, version("20", "u1"))
		gone := version("20", "u1")
		gone.SetDeletionTimestamp(&metav1.Time{Time: time.Unix(1, 0)})
		e.Begin(key, nil)
		e.Wrote(key, gone)
		if !e.Stale(key, version("20", "u1")) {
			t.Error("the copy from before the deletion passed the guard")
		}
		if e.echo(key, version("21", "u1"), true) {
			t.Error("the deletion's event, the next version, was taken for an echo: it is news")
		}
	})
	t.Run("ASecondCopyOfTheEcho", func(t *testing.T) {
		e := NewMarks(gk)
		e.Begin(key, nil)
		e.Wrote(key, version("20", "u1"))
		e.echo(key, version("20", "u1"), false)
		if !e.echo(key, version("20", "u1"), false) {
			t.Error("a second copy of the echo, from another watch, passed after the mark ended")
		}
		if e.echo(key, version("21", "u1"), false) {
			t.Error("someone else's change was dropped after the mark ended")
		}
	})
}

// A child's mark remembers its last apply until the status records it:
// then the status stands in for it, and the mark ends once the cache
// holds the child as kfsm wrote it, whichever comes first. An apply that
// changed nothing answered with someone else's version, which the status
// does not record: that memory stays, so that a resync does not apply the
// child again.
func TestAChildsMarkEndsWhenTheStatusRecordsItsApply(t *testing.T) {
	gk := schema.GroupKind{Kind: "ConfigMap"}
	key := KeyOf(gk, version("", ""))
	digest := wire.DigestOf([]byte(`{"data":{"a":"1"}}`))
	applied := func(e *Marks, rv uint64, created bool) {
		e.Begin(key, nil)
		e.Applied(key, Apply{Digest: digest, Version: rv}, created)
		e.Wrote(key, version(strconv.FormatUint(rv, 10), "u1"))
	}
	t.Run("EchoFirst", func(t *testing.T) {
		e := NewMarks(gk)
		applied(e, 10, true)
		e.echo(key, version("10", "u1"), false)
		if _, ok := e.LastApplied(key); !ok || len(e.marks) != 1 {
			t.Fatal("the mark ended before the status recorded the apply")
		}
		e.Recorded(key, digest.String(), "10")
		if _, ok := e.LastApplied(key); ok || len(e.marks) != 0 {
			t.Errorf("the status records the apply and the cache holds it, and %d marks stay", len(e.marks))
		}
		if !e.echo(key, version("10", "u1"), false) {
			t.Error("the second copy of the echo passed after the mark ended")
		}
	})
	t.Run("RecordedFirst", func(t *testing.T) {
		e := NewMarks(gk)
		applied(e, 10, true)
		e.Recorded(key, digest.String(), "10")
		if len(e.marks) != 1 {
			t.Fatalf("recorded before the echo: %d marks, want 1", len(e.marks))
		}
		if !e.echo(key, version("10", "u1"), false) || len(e.marks) != 0 {
			t.Errorf("the echo came: %d marks stay, want none", len(e.marks))
		}
	})
	t.Run("OtherRecords", func(t *testing.T) {
		e := NewMarks(gk)
		applied(e, 10, false)
		e.echo(key, version("10", "u1"), false)
		for _, rec := range [][2]string{{digest.String(), "9"}, {wire.DigestOf(nil).String(), "10"}, {"", ""}} {
			e.Recorded(key, rec[0], rec[1])
			if last, ok := e.LastApplied(key); !ok || last.Version != 10 {
				t.Errorf("the status records %q at %q: LastApplied = %v, %v, want the apply at 10", rec[0], rec[1], last, ok)
			}
		}
	})
}

// The versions of ended marks' writes are kept in a bounded list: a copy
// that comes later than recentWrites other ended writes passes, and
// costs the parent a reconcile that changes nothing.
func TestEndedWritesAreBounded(t *testing.T) {
	gk := schema.GroupKind{Group: "testing.kfsm.dev", Kind: "Gadget"}
	e := NewMarks(gk)
	for i := range recentWrites + 1 {
		key := Key{GroupKind: gk, NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("o-", i)}}
		rv := strconv.Itoa(100 + i)
		e.Begin(key, nil)
		e.Wrote(key, version(rv, "u1"))
		e.echo(key, version(rv, "u1"), false)
	}
	if len(e.marks) != 0 || len(e.ended.has) != recentWrites {
		t.Fatalf("%d marks and %d ended writes, want none and %d", len(e.marks), len(e.ended.has), recentWrites)
	}
	first := Key{GroupKind: gk, NamespacedName: types.NamespacedName{Namespace: "ns", Name: "o-0"}}
	if e.echo(first, version("100", "u1"), false) {
		t.Error("the oldest ended write is still known")
	}
	last := Key{GroupKind: gk, NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("o-", recentWrites)}}
	if !e.echo(last, version(strconv.Itoa(100+recentWrites), "u1"), false) {
		t.Error("the newest ended write is not known")
	}
}

// A mark is all that stays of an object once its writes have returned:
// what a write in flight holds, and the UID a delete leaves, go with them.
func TestEchoesKeepOnlyAMarkOnceWritesEnd(t *testing.T) {
	gk := schema.GroupKind{Group: "testing.kfsm.dev", Kind: "Gadget"}
	key := KeyOf(gk, version("", ""))
	e := NewMarks(gk)
	e.Begin(key, nil)
	e.Begin(key, nil)
	if !e.echo(key, version("10", "u1"), false) {
		t.Fatal("an event during a write passed")
	}
	e.Wrote(key, version("10", "u1"))
	e.Wrote(key, version("11", "u1"))
	if len(e.flights) != 0 || len(e.marks) != 1 {
		t.Fatalf("after the writes returned: %d flights and %d marks, want 0 and 1", len(e.flights), len(e.marks))
	}
	e.Begin(key, nil)
	e.Deleted(key, "u1", true)
	if len(e.gone) != 1 {
		t.Fatalf("after kfsm deleted the object: %d UIDs of deleted objects, want 1", len(e.gone))
	}
	if !e.echo(key, version("12", "u1"), true) {
		t.Error("the delete event of kfsm's own delete passed")
	}
	if len(e.marks) != 0 || len(e.gone) != 0 || len(e.flights) != 0 {
		t.Errorf("after the delete event: %d marks, %d UIDs, %d flights, want none", len(e.marks), len(e.gone), len(e.flights))
	}
}

// BenchmarkEchoMarks measures what kfsm's record of its own writes keeps
// per object once the writes have settled: for an object of the
// machine's kind, written and its echo seen, the stale-cache guard; for a
// child, created, its echo seen and its apply recorded in the status, the
// version its create left. Each iteration writes 10,000 objects of each
// and reports the live heap per object.
func BenchmarkEchoMarks(b *testing.B) {
	const n = 10_000
	parent := schema.GroupKind{Group: "bench.kfsm.dev", Kind: "BenchObject"}
	child := schema.GroupKind{Kind: "ConfigMap"}
	keys := func(gk schema.GroupKind) []Key {
		keys := make([]Key, n)
		for i := range keys {
			keys[i] = Key{GroupKind: gk, NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("o-%05d", i)}}
		}
		return keys
	}
	parents, children := keys(parent), keys(child)
	objs := make([]client.Object, 2*n)
	for i := range objs {
		objs[i] = &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(100 + i)}}
	}
	perObject := func(write func(e *Marks, i int)) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		e := NewMarks(parent)
		for i := range n {
			write(e, i)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(e)
		return float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	var perParent, perChild float64
	for b.Loop() {
		perParent = perObject(func(e *Marks, i int) {
			e.Begin(parents[i], nil)
			e.Wrote(parents[i], objs[i])
			e.echo(parents[i], objs[i], false)
			e.Read(parents[i], objs[i]) // the next reconcile
		})
		perChild = perObject(func(e *Marks, i int) {
			obj := objs[n+i]
			e.Begin(children[i], nil)
			e.Applied(children[i], Apply{Version: uint64(100 + n + i)}, true)
			e.Wrote(children[i], obj)
			e.echo(children[i], obj, false)
			e.Recorded(children[i], wire.Digest{}.String(), obj.GetResourceVersion())
		})
	}
	b.ReportMetric(perParent, "B/parent")
	b.ReportMetric(perChild, "B/child")
}

// Created names the version that kfsm's create left for as long as the
// child is at it: after the mark has ended too, until an event moves the
// child off it (any write, by anyone) or deletes it.
func TestCreatedLastsUntilTheChildChanges(t *testing.T) {
	gk := schema.GroupKind{Kind: "ConfigMap"}
	key := KeyOf(gk, version("", ""))
	filter := func(e *Marks) predicate.Predicate {
		return e.Filter(func(client.Object) (schema.GroupKind, Role) { return gk, Child }, func(schema.GroupKind, client.Object) {})
	}
	created := func() *Marks {
		e := NewMarks(schema.GroupKind{Kind: "Gadget"})
		e.Begin(key, nil)
		e.Applied(key, Apply{Version: 10}, true)
		e.Wrote(key, version("10", "u1"))
		filter(e).Create(event.CreateEvent{Object: version("10", "u1")})
		e.Recorded(key, wire.Digest{}.String(), "10")
		if len(e.marks) != 0 {
			t.Fatalf("the create's echo came and the status records it: %d marks, want none", len(e.marks))
		}
		return e
	}
	e := created()
	if got := e.Created(key, version("10", "u1")); got != "10" {
		t.Errorf("after the mark ended: Created = %q, want 10", got)
	}
	for _, c := range []client.Object{version("11", "u1"), nil} {
		if got := e.Created(key, c); got != "" {
			t.Errorf("Created(%v) = %q, want none: the copy is not the create's", c, got)
		}
	}
	if got := NewMarks(gk).Created(key, version("10", "u1")); got != "" {
		t.Errorf("with no write: Created = %q, want none", got)
	}
	resync := event.UpdateEvent{ObjectOld: version("10", "u1"), ObjectNew: version("10", "u1")}
	filter(e).Update(resync)
	if got := e.Created(key, version("10", "u1")); got != "10" {
		t.Errorf("after a resync: Created = %q, want 10", got)
	}
	filter(e).Update(event.UpdateEvent{ObjectOld: version("10", "u1"), ObjectNew: version("11", "u1")})
	if len(e.created) != 0 {
		t.Errorf("after a change: %d creates recorded, want none", len(e.created))
	}
	e = created()
	filter(e).Delete(event.DeleteEvent{Object: version("10", "u1")})
	if len(e.created) != 0 {
		t.Errorf("after the deletion: %d creates recorded, want none", len(e.created))
	}
}
