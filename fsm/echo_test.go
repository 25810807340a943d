package fsm

import (
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
	key := keyOf(gk, version("", ""))
	type step struct {
		do   string // "begin", "wrote <rv>", "failed", "deleted", "event <rv>", "delete-event"
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
		"NoWriteNoEcho": {
			reason: "an object kfsm never wrote has no echoes",
			steps:  []step{{do: "event", rv: "10", want: false}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEchoes()
			for i, s := range tc.steps {
				var got bool
				switch s.do {
				case "begin":
					e.begin(key)
					continue
				case "wrote":
					got = e.wrote(key, version(s.rv, "u1"))
				case "failed":
					got = e.wrote(key, nil)
				case "deleted":
					got = e.deleted(key, "u1", true)
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
	key := keyOf(gk, version("", ""))
	e := newEchoes()
	e.begin(key)
	e.wrote(key, version("20", "u1"))
	for range 3 {
		if e.stale(key, version("20", "u1")) {
			t.Fatal("the copy kfsm wrote is taken for stale")
		}
	}
	if !e.stale(key, version("19", "u1")) {
		t.Error("a copy older than kfsm's write passed after fresh reads")
	}
	e.forget(key)
	if e.stale(key, version("19", "u1")) {
		t.Error("a forgotten object still has a mark")
	}
}

// A mark is all that stays of an object once its writes have returned:
// what a write in flight holds, and the UID a delete leaves, go with them.
func TestEchoesKeepOnlyAMarkOnceWritesEnd(t *testing.T) {
	gk := schema.GroupKind{Group: "testing.kfsm.dev", Kind: "Gadget"}
	key := keyOf(gk, version("", ""))
	e := newEchoes()
	e.begin(key)
	e.begin(key)
	if !e.echo(key, version("10", "u1"), false) {
		t.Fatal("an event during a write passed")
	}
	e.wrote(key, version("10", "u1"))
	e.wrote(key, version("11", "u1"))
	if len(e.flights) != 0 || len(e.marks) != 1 {
		t.Fatalf("after the writes returned: %d flights and %d marks, want 0 and 1", len(e.flights), len(e.marks))
	}
	e.begin(key)
	e.deleted(key, "u1", true)
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
