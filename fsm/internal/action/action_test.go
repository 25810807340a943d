package action

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

var obj = types.NamespacedName{Namespace: "ns", Name: "db"}

func newPool(t *testing.T, changed func(Key, string, bool, error)) *Pool {
	t.Helper()
	p := New("test", 2, logr.Discard(), nil, clock.RealClock{}, changed)
	t.Cleanup(p.stop)
	return p
}

// awaitEnd waits until the run of k reports an end, and returns its view.
func awaitEnd(t *testing.T, p *Pool, k Key, record string) View {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		r := p.get(k)
		done := r != nil && r.phase == ended
		p.mu.Unlock()
		if done {
			v, _ := p.Take(k, record)
			return v
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the run of %v did not end", k)
	return View{}
}

func TestAPreparedRunStartsOnlyOnceItsWalkIsWritten(t *testing.T) {
	p := newPool(t, nil)
	k := Key{Object: obj, Name: "backup"}
	started := make(chan struct{}, 2)
	job := Job{Work: func(context.Context, *Handle) error { started <- struct{}{}; return nil }}

	p.Prepare(k, "uid", "r1", false, job)
	p.Settle(obj, false)
	if _, ok := p.Take(k, "r1"); ok {
		t.Fatal("a run prepared by a walk that was not written is still known")
	}
	p.Prepare(k, "uid", "r2", false, job)
	select {
	case <-started:
		t.Fatal("the work started before its walk was written")
	case <-time.After(50 * time.Millisecond):
	}
	p.Settle(obj, true)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the work did not start once its walk was written")
	}
	if v := awaitEnd(t, p, k, "r2"); v.Err != nil {
		t.Fatalf("the run failed: %v", v.Err)
	}
	if len(started) != 0 {
		t.Error("the run of the walk that was not written started too")
	}
}

func TestAnOutcomeStaysUntilAWrittenWalkRecordsIt(t *testing.T) {
	p := newPool(t, nil)
	k := Key{Object: obj, Name: "backup"}
	p.Prepare(k, "uid", "r", false, Job{Work: func(_ context.Context, h *Handle) error { h.Result = "b-1"; return nil }})
	p.Settle(obj, true)
	if v := awaitEnd(t, p, k, "r"); v.Result != "b-1" {
		t.Fatalf("result %q, want b-1", v.Result)
	}
	p.Settle(obj, false) // the walk that took it was not written
	if v, ok := p.Take(k, "r"); !ok || !v.Ended || v.Result != "b-1" {
		t.Fatalf("after a walk that was not written, Take = %+v, %v; want the outcome again", v, ok)
	}
	if _, ok := p.Take(k, "another record"); ok {
		t.Error("Take reported the run under another record's key")
	}
	p.Settle(obj, true)
	if _, ok := p.Take(k, "r"); ok {
		t.Error("the outcome is still kept after a written walk recorded it")
	}
	if len(p.runs) != 0 {
		t.Errorf("the pool keeps %d objects' runs, want none", len(p.runs))
	}
}

func TestACheckpointReturnsOnceAWrittenWalkRecordsIt(t *testing.T) {
	p := newPool(t, nil)
	k := Key{Object: obj, Name: "upload"}
	saved := make(chan error, 1)
	p.Prepare(k, "uid", "r", false, Job{Progress: "2", Work: func(ctx context.Context, h *Handle) error {
		saved <- h.Checkpoint(ctx, "3")
		<-ctx.Done()
		return nil
	}})
	if v, _ := p.Take(k, "r"); v.Progress != "2" {
		t.Errorf("a resumed run's progress is %q, want the checkpoint it resumes from, 2", v.Progress)
	}
	p.Settle(obj, true)
	waitFor(t, func() bool { v, _ := p.Take(k, "r"); return v.Progress == "3" })
	p.Settle(obj, false)
	select {
	case err := <-saved:
		t.Fatalf("Checkpoint returned (%v) before a written walk recorded it", err)
	case <-time.After(50 * time.Millisecond):
	}
	if v, _ := p.Take(k, "r"); v.Progress != "3" || v.Beat.IsZero() {
		t.Errorf("Take = %+v, want progress 3 and a heartbeat", v)
	}
	p.Settle(obj, true)
	select {
	case err := <-saved:
		if err != nil {
			t.Errorf("Checkpoint = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Checkpoint did not return after a written walk recorded it")
	}
}

func TestLeavingAStateCancelsItsRunOnceTheWalkIsWritten(t *testing.T) {
	p := newPool(t, nil)
	k := Key{Object: obj, Name: "backup"}
	cancelled := make(chan struct{})
	p.Prepare(k, "uid", "r", false, Job{Work: func(ctx context.Context, _ *Handle) error {
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	}})
	p.Settle(obj, true)
	p.Leave(k)
	p.Settle(obj, false)
	select {
	case <-cancelled:
		t.Fatal("a walk that was not written cancelled the run")
	case <-time.After(50 * time.Millisecond):
	}
	p.Leave(k)
	p.Settle(obj, true)
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the run of the state left was not cancelled")
	}
}

func TestAnObserveThatCannotTellIsAskedAgainAndTheWorkWaits(t *testing.T) {
	p := newPool(t, nil)
	k := Key{Object: obj, Name: "backup"}
	var mu sync.Mutex
	var asked []time.Time
	worked := false
	p.Prepare(k, "uid", "r", false, Job{
		Observe: func(context.Context, *Handle) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, time.Now())
			if len(asked) == 1 {
				return false, errors.New("no answer")
			}
			return true, nil
		},
		Work: func(context.Context, *Handle) error { mu.Lock(); worked = true; mu.Unlock(); return nil },
	})
	p.Settle(obj, true)
	if v := awaitEnd(t, p, k, "r"); v.Err != nil {
		t.Fatalf("the run failed: %v", v.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if worked {
		t.Error("the work ran although Observe found the effect done")
	}
	if len(asked) != 2 || asked[1].Sub(asked[0]) < time.Second {
		t.Errorf("Observe was asked at %v, want twice, a backoff of 1 s apart", asked)
	}
}

func TestGivingUpSlotsCancelsTheirRunsAndWaitsForThem(t *testing.T) {
	p := newPool(t, nil)
	mine, theirs := Key{Object: obj, Name: "a"}, Key{Object: types.NamespacedName{Namespace: "ns", Name: "other"}, Name: "a"}
	running := make(chan struct{}, 2)
	block := Job{Work: func(ctx context.Context, _ *Handle) error {
		running <- struct{}{}
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // returns a moment after
		return ctx.Err()
	}}
	p.Prepare(mine, "lost", "r", false, block)
	p.Prepare(theirs, "kept", "r", false, block)
	p.Settle(mine.Object, true)
	p.Settle(theirs.Object, true)
	<-running
	<-running
	done := p.CancelSlots(func(uid types.UID) (int, bool) {
		if uid == "lost" {
			return 7, true
		}
		return 8, false
	})
	if len(done) != 1 || len(done[7]) != 1 {
		t.Fatalf("CancelSlots returned %v, want one channel for slot 7", done)
	}
	select {
	case <-done[7][0]:
	case <-time.After(10 * time.Second):
		t.Fatal("the run of the lost slot did not return")
	}
	if _, ok := p.Take(theirs, "r"); !ok {
		t.Error("the run of a kept slot was cancelled")
	}
	if _, ok := p.Take(mine, "r"); ok {
		t.Error("the run of a lost slot is still known")
	}
}

func TestObserversHearOfAStartBeforeItsEnd(t *testing.T) {
	var mu sync.Mutex
	type heard struct {
		k     Key
		ended bool
	}
	var log []heard
	p := newPool(t, func(k Key, _ string, ended bool, _ error) {
		mu.Lock()
		log = append(log, heard{k, ended})
		mu.Unlock()
	})
	for i := range 20 {
		o := types.NamespacedName{Namespace: "ns", Name: string(rune('a' + i))}
		p.Prepare(Key{Object: o, Name: "quick"}, "uid", "r", false, Job{Work: func(context.Context, *Handle) error { return nil }})
		p.Settle(o, true)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(log) == 40 })
	mu.Lock()
	defer mu.Unlock()
	started := map[Key]bool{}
	for _, h := range log {
		if h.ended && !started[h.k] {
			t.Fatalf("the end of %v was heard before its start: %v", h.k, log)
		}
		started[h.k] = true
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDrainCancelsEveryRunAndWaitsForIt(t *testing.T) {
	p := newPool(t, nil)
	k := Key{Object: obj, Name: "backup"}
	var returned atomic.Bool
	working := make(chan struct{})
	p.Prepare(k, "uid", "r", false, Job{Work: func(ctx context.Context, _ *Handle) error {
		close(working)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a moment to clean up
		returned.Store(true)
		return ctx.Err()
	}})
	p.Settle(obj, true)
	<-working
	late := Key{Object: obj, Name: "late"}
	ctx, stop := context.WithCancel(context.Background())
	drained := make(chan error)
	go func() { drained <- p.Drain(ctx) }()
	stop()
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if !returned.Load() {
		t.Error("Drain returned before the run did")
	}
	p.Prepare(late, "uid", "r2", false, Job{Work: func(context.Context, *Handle) error {
		t.Error("a run started after the manager stopped")
		return nil
	}})
	p.Settle(obj, true)
	if _, ok := p.Take(late, "r2"); ok {
		t.Error("a run prepared after the manager stopped is still known")
	}
}
