package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
)

var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec int) metav1.Time { return metav1.NewTime(start.Add(time.Duration(sec) * time.Second)) }

// doorVersion is a version of a door whose history keeps its last keep
// transitions of all it made.
func doorVersion(uid string, keep int, made ...fsm.Transition) inspect.Object {
	o := inspect.Object{Name: "door-" + uid, UID: uid}
	o.Status.History = made[max(0, len(made)-keep):]
	o.Status.State = made[len(made)-1].To
	return o
}

// doorMoves are the transitions of a door that opens and closes n times,
// one move a second from second 1, two of them in each second when
// sameSecond is set.
func doorMoves(n int, sameSecond bool) []fsm.Transition {
	moves := []fsm.Transition{{To: "Closed", Reason: fsm.ReasonCreated, Time: at(0)}}
	for i := 1; i <= 2*n; i++ {
		sec := i
		if sameSecond {
			sec = (i + 1) / 2
		}
		from, to := fsm.State("Closed"), fsm.State("Open")
		if i%2 == 0 {
			from, to = to, from
		}
		moves = append(moves, fsm.Transition{From: from, To: to, Reason: fsm.ReasonNext, Time: at(sec)})
	}
	return moves
}

// Edges of the doors' graph: 0 Closed→Open, 1 Open→Closed, 2 Open→Closed (timeout).
func TestTheLedgerKeepsWhatHistoriesForget(t *testing.T) {
	cases := map[string]struct {
		reason string
		feed   func(l *ledger)
		want   map[string]int
		gaps   int
	}{
		"EveryVersion": {
			reason: "a door read after each of its 21 moves counts 21, though its history keeps 3",
			feed: func(l *ledger) {
				moves := doorMoves(10, false)
				var before *inspect.Object
				for i := range moves {
					o := doorVersion("a", 3, moves[:i+1]...)
					l.record(before, o, start)
					before = &o
				}
			},
			want: map[string]int{"start": 1, "0": 10, "1": 10},
		},
		"SameMoveInOneSecond": {
			reason: "two opens in one second count twice, and reading the same version again adds nothing",
			feed: func(l *ledger) {
				moves := doorMoves(2, true) // created; 1s open, close; 2s open, close
				o := doorVersion("b", 10, moves...)
				l.record(nil, o, start)
				l.record(&o, o, start)
			},
			want: map[string]int{"start": 1, "0": 2, "1": 2},
		},
		"Deleted": {
			reason: "a door deleted after its moves still counts them, by the timeout's reason on the timeout edge",
			feed: func(l *ledger) {
				moves := []fsm.Transition{
					{To: "Closed", Reason: fsm.ReasonCreated, Time: at(1)},
					{From: "Closed", To: "Open", Reason: fsm.ReasonNext, Time: at(2)},
					{From: "Open", To: "Closed", Reason: fsm.ReasonTimeout, Time: at(3)},
					{From: "Closed", To: "Removed", Reason: fsm.ReasonDeleted, Time: at(4)},
				}
				l.record(nil, doorVersion("c", 10, moves...), start)
			},
			want: map[string]int{"start": 1, "0": 1, "2": 1, "delete": 1},
		},
		"Window": {
			reason: "moves before the window are not counted",
			feed: func(l *ledger) {
				l.record(nil, doorVersion("d", 10, doorMoves(2, false)...), start.Add(3*time.Second))
			},
			want: map[string]int{"0": 1, "1": 1}, // of the moves at 1, 2, 3 and 4
		},
		"Gap": {
			reason: "a door read before and after more moves than its history keeps is a gap",
			feed: func(l *ledger) {
				moves := doorMoves(5, false)
				o1 := doorVersion("e", 3, moves[:2]...)
				o2 := doorVersion("e", 3, moves...)
				l.record(nil, o1, start)
				l.record(&o1, o2, start)
			},
			want: map[string]int{"start": 1, "0": 2, "1": 2},
			gaps: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := newLedger(doors().Graph())
			tc.feed(l)
			got := l.count(start)
			if diff := cmp.Diff(tc.want, got); diff != "" || l.gaps != tc.gaps {
				t.Errorf("%s\ncount: -want +got:\n%s\ngaps = %d, want %d", tc.reason, diff, l.gaps, tc.gaps)
			}
		})
	}
}

// The ledger forgets transitions once they leave the window, so that its
// memory is bounded by the transitions of one window.
func TestTheLedgerForgetsWhatLeavesTheWindow(t *testing.T) {
	l := newLedger(doors().Graph())
	for i := range 100 {
		l.record(nil, doorVersion(fmt.Sprint(i), 10, doorMoves(1, false)...), start)
	}
	if got := l.count(start)["0"]; got != 100 {
		t.Fatalf("100 doors opened at 1s: count = %d, want 100", got)
	}
	if got := l.count(start.Add(3 * time.Second)); len(got) != 0 || len(l.seen) != 0 {
		t.Fatalf("after the window moved past every move: count = %v, %d transitions kept, want none", got, len(l.seen))
	}
}
