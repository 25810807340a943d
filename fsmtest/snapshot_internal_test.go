package fsmtest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsmtest/internal/explore"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// polling is a driver whose operator has no process of its own: its
// await polls cond until it holds.
type polling struct{}

func (polling) await(_ string, cond func() (bool, string)) {
	for ok, _ := cond(); !ok; ok, _ = cond() {
		time.Sleep(10 * time.Millisecond)
	}
}

// A faulty run's snapshot at an Await is of a moment when what it awaits
// held. An operator that polls on its own clock can write between the
// last read of the condition and the snapshot: here it writes a
// transient status right after that read, and heals it a moment later.
// The snapshot must not be of the transient status.
func TestASnapshotIsOfAMomentWhenTheAwaitHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an API server, which -short does not start")
	}
	t.Parallel()
	e := New(t)
	g, note := notedGadget(t, e)
	key := client.ObjectKeyFromObject(g)
	var healing sync.WaitGroup
	t.Cleanup(healing.Wait)
	healthy := 0
	e.await("a healthy gadget", func() (bool, string) {
		if err := e.Client.Get(t.Context(), key, g); err != nil {
			t.Fatal(err)
		}
		if g.Status.Note != "" {
			return false, "transient"
		}
		// Await's driver reads once, then the last read before the
		// snapshot: right after that one, the operator writes.
		if healthy++; healthy == 2 {
			note("transient")
			healing.Go(func() {
				time.Sleep(100 * time.Millisecond)
				note("")
			})
		}
		return true, ""
	})
	got := e.snap.taken[0].objects["Gadget/g"].(map[string]any)["status"]
	if note := got.(map[string]any)["note"]; note != nil {
		t.Errorf("the snapshot holds status.note %q, which the gadget had when the condition did not hold", note)
	}
}

// A faulty run is the clean run until its first fault strikes: its
// snapshots before then are not read, and not compared, and from then on
// they are, and a difference from the clean run's fails the run.
func TestAFaultyRunsSnapshotsAreReadOnceItsFaultStruck(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an API server, which -short does not start")
	}
	t.Parallel()
	e := New(t)
	_, note := notedGadget(t, e)
	fault := explore.Atom{Kind: explore.Crash, N: 1}
	e.snap.trace, e.snap.point = explore.NewTracker(explore.World{Namespace: e.Namespace}, false), fault.String()
	clean := map[string]any{"Gadget/g": map[string]any{"status": map[string]any{"note": "clean"}}}
	e.snap.clean = &snapshots{taken: map[int]snapshot{0: {what: "before", objects: clean}, 1: {what: "after", objects: clean}}}
	note("faulty")
	e.Await("before", func() bool { return true })
	if got := e.snap.taken[0]; got.what != "before" || got.objects != nil {
		t.Errorf("before the fault struck, the run's snapshot is %+v, want none read", got)
	}
	e.snap.trace.Struck(fault, 1)
	e.Await("after", func() bool { return true })
	if e.snap.taken[1].objects == nil {
		t.Fatal("once the fault struck, the run's snapshot was not read")
	}
	rec := &runT{TB: t, name: "compare"}
	rec.do(func() { e.snap.compare(rec) })
	failures := rec.failures()
	if len(failures) != 1 || !strings.Contains(failures[0], `at await "after" the objects differ`) {
		t.Errorf("compare reported %q, want one difference, at the await after the fault", failures)
	}
}

// notedGadget makes a gadget g in e's namespace, for a faulty run's
// snapshots under the polling driver, and returns it with note, which
// writes its status.note as the operator would: a write of its own.
func notedGadget(t *testing.T, e *Env) (*v1alpha1.Gadget, func(text string)) {
	e.snap, e.driver = &snapshots{holdUntil: -1}, polling{}
	e.kindsMu.Lock()
	e.parents = append(e.parents, v1alpha1.GroupVersion.WithKind("Gadget"))
	e.kindsMu.Unlock()
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.Namespace}}
	if err := e.Client.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(g)
	return g, func(text string) {
		e.api.begin()
		defer e.api.done(&Write{Verb: "update", apiKey: apiKey{Resource: "gadgets", Namespace: key.Namespace, Name: key.Name}, Subresource: "status"}, false)
		var cur v1alpha1.Gadget
		if err := e.Client.Get(context.Background(), key, &cur); err != nil {
			t.Error(err)
			return
		}
		cur.Status.Note = text
		if err := e.Client.Status().Update(context.Background(), &cur); err != nil {
			t.Error(err)
		}
	}
}

// An operator that is still busy when quiet's limit runs out (under load,
// a restarted one still reading its objects) is waited for again: the
// snapshot of a faulty run is of the operator at rest, never of one in
// the middle of its work, which would read as objects that differ. (Not
// parallel: its work is timed against the limit, and the Explores of the
// parallel tests load the machine.)
func TestASnapshotWaitsForAnOperatorStillBusyAfterTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an API server, which -short does not start")
	}
	e := New(t)
	_, note := notedGadget(t, e)
	e.snap.limit = time.Second
	var busy sync.WaitGroup
	t.Cleanup(busy.Wait)
	busy.Go(func() {
		// Work longer than one limit, and shorter than two with a moment
		// of quiet.
		for i, begun := 0, time.Now(); time.Since(begun) < 1200*time.Millisecond; i++ {
			note(fmt.Sprintf("busy %d", i))
			time.Sleep(50 * time.Millisecond)
		}
		note("done")
	})
	time.Sleep(100 * time.Millisecond) // the work has begun
	e.await("the gadget", func() (bool, string) { return true, "" })
	got := e.snap.taken[0].objects["Gadget/g"].(map[string]any)["status"]
	if note := got.(map[string]any)["note"]; note != "done" {
		t.Errorf("the snapshot holds status.note %q, which the gadget had while the operator still wrote; want %q", note, "done")
	}
}

// fatalT records the message of Fatal and ends its goroutine, as
// testing.T's does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

// An operator that never comes to rest fails the Await with what kept it
// busy, not with a snapshot taken while it wrote.
func TestAnAwaitOnAnOperatorNeverQuietSaysWhatItDid(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an API server, which -short does not start")
	}
	t.Parallel()
	e := New(t)
	_, note := notedGadget(t, e)
	e.snap.limit = 100 * time.Millisecond
	note("busy")
	stop := make(chan struct{})
	var busy sync.WaitGroup
	t.Cleanup(busy.Wait)
	busy.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
				note(fmt.Sprintf("busy %d", i))
			}
		}
	})
	f := &fatalT{TB: t}
	e.T = f
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.await("the gadget", func() (bool, string) { return true, "" })
	}()
	<-done
	close(stop)
	e.T = t
	if !strings.Contains(f.msg, "the gadget held, but the operator was still busy 200ms later: it still wrote (last: ") || !strings.Contains(f.msg, "update gadgets g status") {
		t.Errorf("the Await failed with %q; want it to say the operator was still busy and name its last writes", f.msg)
	}
	if len(e.snap.taken) != 0 {
		t.Errorf("the Await kept a snapshot of an operator that never came to rest: %v", e.snap.taken)
	}
}

// A process that crashed is replaced by a goroutine of its own, which a
// loaded machine may run late: until the new process is starting, the
// dead one writes nothing, and that quiet is no rest to take a snapshot
// at. The operator is caught up again only once the crashed process is
// no longer the current one.
func TestACrashedProcessNotYetReplacedIsNotCaughtUp(t *testing.T) {
	dead := &process{life: &life{onCrash: func() {}}}
	o := &Operator{procs: []*process{dead}, renewed: -1}
	if !o.caughtUp() {
		t.Fatal("an operator whose one process runs is not caught up")
	}
	dead.life.crash()
	if o.caughtUp() {
		t.Error("an operator whose one process crashed and is not yet replaced is caught up")
	}
	o.closed = true
	if !o.caughtUp() {
		t.Error("an operator stopped for good after a crash, which no process replaces, is not caught up")
	}
	o.closed = false
	o.procs[0] = &process{n: 2, life: &life{}}
	if !o.caughtUp() {
		t.Error("an operator whose crashed process was replaced is not caught up")
	}
}
