package fsmtest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// A correct machine passes every combination of two faults, and most of
// the second faults fall on points explored already.
func TestExplorePassesACorrectMachine(t *testing.T) {
	t.Parallel()
	fsmtest.Explore(t, generated(false), createAndDelete, fsmtest.Depth(2))
}

// Two replicas share a machine's gadgets; under every fault, no gadget
// is reconciled by both at once, and every run passes.
func TestExplorePassesAShardedMachine(t *testing.T) {
	t.Parallel()
	fsmtest.Explore(t, generated(false), twoGadgets, fsmtest.Replicas(2))
}

// twoGadgets makes two gadgets, once two replicas share the work, and
// deletes them.
func twoGadgets(e *fsmtest.Env) {
	e.Await("two replicas to hold slots", func() bool { return len(slotHolders(e)) == 2 })
	var gs []*v1alpha1.Gadget
	for i := range 2 {
		g := gadget()
		g.Name = fmt.Sprintf("g-%d", i)
		e.Create(g)
		gs = append(gs, g)
	}
	e.Await("every gadget to be Ready", func() bool {
		for _, g := range gs {
			if e.State(g) != Ready {
				return false
			}
		}
		return true
	})
	for _, g := range gs {
		e.Delete(g)
	}
	e.Await("every gadget to be gone", func() bool {
		for _, g := range gs {
			if e.Get(g) {
				return false
			}
		}
		return true
	})
}

// slotHolders lists the replicas whose Leases in e's namespace hold
// slots.
func slotHolders(e *fsmtest.Env) []string {
	var leases coordinationv1.LeaseList
	if err := e.Client.List(context.Background(), &leases, client.InNamespace(e.Namespace), client.HasLabels{sharding.LabelShards}); err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, l := range leases.Items {
		if l.Annotations[sharding.AnnotationSlots] != "" {
			out = append(out, l.Name)
		}
	}
	return out
}

// expiring waits in Working, on the fake clock, for the spec to say
// "finish", and gives up after half an hour. Broken, its TimedOut state
// counts its runs in its status, so that it never comes to rest there;
// the scenario finishes in time, and only a jump of the clock reaches it.
func expiring(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("expiring", fsm.Lifecycle).
			Initial(Working).
			State(Working, func(_ context.Context, r *request) fsm.Result {
				if r.Object.Spec.Mode == "finish" {
					return fsm.Next(Finished)
				}
				return fsm.Wait(time.Hour, "Working")
			}, fsm.To(Finished), fsm.Timeout(30*time.Minute, TimedOut)).
			State(TimedOut, func(_ context.Context, r *request) fsm.Result {
				if broken {
					r.Object.Status.Count++
				}
				return fsm.Done()
			}, fsm.To(Working)).
			State(Finished, nil, fsm.Final()).
			OnDelete(Cleanup).
			State(Cleanup, nil, fsm.Final()).
			WithClock(e.Clock)
	}
}

func finishInTime(e *fsmtest.Env) {
	g := gadget()
	e.Create(g)
	e.AwaitState(g, Working)
	e.Update(g, func() { g.Spec.Mode = "finish" })
	e.AwaitState(g, Finished)
}

// A machine on the fake clock whose timeout path comes to rest passes
// the runs where the clock jumps past its timeout.
func TestExplorePassesAMachineWhoseTimeoutComesToRest(t *testing.T) {
	t.Parallel()
	fsmtest.Explore(t, expiring(false), finishInTime)
}

// MaxRuns stops Explore after that many faulty runs, and what AlsoRun
// sets up is registered with each run's manager, made for the run's Env:
// the clean run and the two faulty ones, though the machine has more
// points to strike, start the runnable that counts them.
func TestExploreStopsAtMaxRunsAndSetsUpAlsoRunInEach(t *testing.T) {
	counter, runs := countRuns()
	fsmtest.Explore(t, expiring(false), finishInTime, fsmtest.MaxRuns(2), counter)
	if n := runs(); n != 3 {
		t.Errorf("the runnable that AlsoRun sets up started in %d runs, want 3: the clean run and MaxRuns' two", n)
	}
}

// A Budget spent before the faulty runs begin leaves the clean run alone.
func TestExploreStopsWhenItsBudgetIsSpent(t *testing.T) {
	counter, runs := countRuns()
	fsmtest.Explore(t, expiring(false), finishInTime, fsmtest.Budget(time.Nanosecond), counter)
	if n := runs(); n != 1 {
		t.Errorf("%d runs started within a budget of a nanosecond, want the clean run alone", n)
	}
}

// countRuns is an AlsoRun option whose runnable notes the namespace of
// each run that starts it, and the count of those runs.
func countRuns() (fsmtest.FaultOption, func() int) {
	var mu sync.Mutex
	started := map[string]bool{}
	option := fsmtest.AlsoRun(func(e *fsmtest.Env) func(manager.Manager) error {
		return func(m manager.Manager) error {
			return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
				mu.Lock()
				started[e.Namespace] = true
				mu.Unlock()
				<-ctx.Done()
				return nil
			}))
		}
	})
	return option, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(started)
	}
}

// restless counts its runs in its status when broken: every resync
// writes.
func restless(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("restless", fsm.Lifecycle).
			Initial(Working).
			State(Working, func(_ context.Context, r *request) fsm.Result {
				if broken {
					r.Object.Status.Count++
				}
				return fsm.Done()
			}, fsm.To(Ready)).
			State(Ready, nil, fsm.Final()).
			OnDelete(Cleanup).
			State(Cleanup, nil, fsm.Final())
	}
}

// A VM created in an action that sends its key as the client token and
// observes by it is made once under every pair of faults: calls that
// fail, lose their answer or time out after the effect, beside crashes,
// failed writes and late events.
func TestExplorePassesAMachineWhoseCallsLoseTheirAnswers(t *testing.T) {
	t.Parallel()
	fsmtest.Explore(t, provisioning(false), createAndDelete, fsmtest.Depth(2))
}
