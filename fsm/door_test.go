package fsm_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
)

// The documents show these tests word for word (a test checks it):
// TestDoor in the README's tutorial, TestDoorSurvivesFaults and
// TestDoorUnderSpecChanges in docs/testing.md.

func TestDoor(t *testing.T) {
	e := fsmtest.New(t) // a namespace of its own on the package's API server
	fsmtest.Run(e, tutorial().WithClock(e.Clock))

	door := &Door{ObjectMeta: metav1.ObjectMeta{Name: "front"}}
	e.Create(door)
	e.AwaitReady(door)
	e.Update(door, func() { door.Spec.Open = true })
	e.AwaitState(door, "Open")

	// Held open a minute, the door is closed by its timeout, and opened
	// again because its spec still says so.
	e.Clock.Step(time.Minute)
	e.Await("the door to open again", func() bool { return e.Get(door) && door.Status.Opened == 2 })
	want := []string{"Closed→Open", "Open→Closed (timeout)", "Closed→Open"}
	if diff := cmp.Diff(want, e.Transitions(door)); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}

	e.Delete(door)
	e.AwaitGone(door)
}

func TestDoorSurvivesFaults(t *testing.T) {
	door := func(e *fsmtest.Env) *fsm.Machine[*Door] { return tutorial() }
	// Not Bursts: the door counts the openings it sees, and an opening
	// closed again before the operator looked is not one.
	only := fsmtest.Only(fsmtest.Crash, fsmtest.FailWrite, fsmtest.StaleReads, fsmtest.Conflicts)
	fsmtest.Faults(t, door, func(e *fsmtest.Env) {
		door := &Door{ObjectMeta: metav1.ObjectMeta{Name: "front"}}
		e.Create(door)
		e.AwaitReady(door)
		e.Update(door, func() { door.Spec.Open = true })
		e.AwaitState(door, "Open")
		e.Update(door, func() { door.Spec.Open = false })
		e.AwaitReady(door)
		e.Delete(door)
		e.AwaitGone(door)
	}, only)
}

func TestDoorUnderSpecChanges(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, tutorial())
	changes, err := fsmtest.Mutations(e.CRD(&Door{}), 1) // the seed; the log names it
	if err != nil {
		t.Fatal(err)
	}

	door := &Door{ObjectMeta: metav1.ObjectMeta{Name: "front"}}
	e.Create(door)
	e.AwaitReady(door)
	for range 6 {
		// Open flipped, or removed: whatever the schema allows and the
		// API server accepts. Apply reads the door afterwards.
		changes.Apply(e, door, 1)
		if door.Spec.Open {
			e.AwaitState(door, "Open")
		} else {
			e.AwaitState(door, "Closed")
		}
	}
}
