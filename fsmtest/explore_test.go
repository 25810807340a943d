package fsmtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// A correct machine passes every combination of two faults, and most of
// the second faults fall on points explored already.
func TestExplorePassesACorrectMachine(t *testing.T) {
	fsmtest.Explore(t, generated(false), createAndDelete, fsmtest.Depth(2))
}

// Two replicas share a machine's gadgets; under every fault, no gadget
// is reconciled by both at once, and every run passes.
func TestExplorePassesAShardedMachine(t *testing.T) {
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
	fsmtest.Explore(t, expiring(false), finishInTime)
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
	fsmtest.Explore(t, provisioning(false), createAndDelete, fsmtest.Depth(2))
}
