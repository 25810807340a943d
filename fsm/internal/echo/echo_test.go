package echo

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
		do   string // "begin", "made <rv>", "wrote <rv>", "failed", "deleted", "event <rv>", "delete-event"
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
		"NoWriteNoEcho": {
			reason: "an object kfsm never wrote has no echoes",
			steps:  []step{{do: "event", rv: "10", want: false}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := NewMarks()
			for i, s := range tc.steps {
				var got bool
				switch s.do {
				case "begin":
					e.Begin(key)
					continue
				case "wrote":
					got = e.Wrote(key, version(s.rv, "u1"))
				case "made":
					e.Made(key, version(s.rv, "u1"))
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
func TestStaleGuardLastsUntilForgotten(t *testing.T) {
	gk := schema.GroupKind{Group: "testing.kfsm.dev", Kind: "Gadget"}
	key := KeyOf(gk, version("", ""))
	e := NewMarks()
	e.Begin(key)
	e.Wrote(key, version("20", "u1"))
	for range 3 {
		if e.Stale(key, version("20", "u1")) {
			t.Fatal("the copy kfsm wrote is taken for stale")
		}
	}
	if !e.Stale(key, version("19", "u1")) {
		t.Error("a copy older than kfsm's write passed after fresh reads")
	}
	e.Forget(key)
	if e.Stale(key, version("19", "u1")) {
		t.Error("a forgotten object still has a mark")
	}
}

// A mark is all that stays of an object once its writes have returned:
// what a write in flight holds, and the UID a delete leaves, go with them.
func TestEchoesKeepOnlyAMarkOnceWritesEnd(t *testing.T) {
	gk := schema.GroupKind{Group: "testing.kfsm.dev", Kind: "Gadget"}
	key := KeyOf(gk, version("", ""))
	e := NewMarks()
	e.Begin(key)
	e.Begin(key)
	if !e.echo(key, version("10", "u1"), false) {
		t.Fatal("an event during a write passed")
	}
	e.Wrote(key, version("10", "u1"))
	e.Wrote(key, version("11", "u1"))
	if len(e.flights) != 0 || len(e.marks) != 1 {
		t.Fatalf("after the writes returned: %d flights and %d marks, want 0 and 1", len(e.flights), len(e.marks))
	}
	e.Begin(key)
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
// per object written, once the writes have returned: it is kept for every
// object for as long as the object exists. Each iteration records a write
// of 10,000 objects of one kind and reports the live heap per object.
func BenchmarkEchoMarks(b *testing.B) {
	const n = 10_000
	gk := schema.GroupKind{Group: "bench.kfsm.dev", Kind: "BenchObject"}
	keys := make([]Key, n)
	objs := make([]client.Object, n)
	for i := range keys {
		keys[i] = Key{GroupKind: gk, NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("o-%05d", i)}}
		objs[i] = &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(100 + i)}}
	}
	var perObject float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		e := NewMarks()
		for i, key := range keys {
			e.Begin(key)
			e.Wrote(key, objs[i])
			e.Applied(key, Apply{Version: uint64(100 + i)}, false)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perObject = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(e)
	}
	b.ReportMetric(perObject, "B/object")
}

// Created names the version that kfsm's create left only while that
// create is its last write and the copy read is that version.
func TestCreatedLastsUntilTheNextWrite(t *testing.T) {
	gk := schema.GroupKind{Kind: "ConfigMap"}
	key := KeyOf(gk, version("", ""))
	e := NewMarks()
	if got := e.Created(key, version("10", "u1")); got != "" {
		t.Errorf("before any write: Created = %q, want none", got)
	}
	e.Begin(key)
	e.Applied(key, Apply{Version: 10}, true)
	e.Wrote(key, version("10", "u1"))
	steps := []struct {
		copy client.Object
		want string
	}{
		{version("10", "u1"), "10"},
		{version("11", "u1"), ""}, // someone else wrote it since
		{nil, ""},                 // the cache does not have it
	}
	for _, s := range steps {
		if got := e.Created(key, s.copy); got != s.want {
			t.Errorf("Created(%v) = %q, want %q", s.copy, got, s.want)
		}
	}
	e.Begin(key)
	e.Applied(key, Apply{Version: 12}, false)
	e.Wrote(key, version("12", "u1"))
	if got := e.Created(key, version("12", "u1")); got != "" {
		t.Errorf("after an apply: Created = %q, want none", got)
	}
}
