package fsmtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
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
	if err := e.Client.List(context.Background(), &leases, client.InNamespace(e.Namespace), client.HasLabels{fsm.LabelShards}); err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, l := range leases.Items {
		if l.Annotations[fsm.AnnotationSlots] != "" {
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

// The broken machines of sloppy, and one that never comes to rest, fail
// Explore at depth 1, each with its faults, a replay command, and the
// transitions beside the clean run's. They run in a test process of their
// own, whose failure is the expected outcome.
func TestExploreCatchesBrokenMachines(t *testing.T) {
	if os.Getenv("FSMTEST_EXPLORE_BROKEN") != "" {
		t.Skip("running inside the broken machines' own process")
	}
	if testing.Short() {
		t.Skip("fault exploration runs without -short")
	}
	t.Parallel() // another process does the work
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestExploreBrokenMachines$", "-test.v")
	cmd.Env = append(os.Environ(), "FSMTEST_EXPLORE_BROKEN=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the broken machines passed exploration:\n%s", out)
	}
	for name := range sloppy {
		if !strings.Contains(string(out), "--- FAIL: TestExploreBrokenMachines/"+name+" ") {
			t.Errorf("%s: Explore did not fail it", name)
		}
		if !strings.Contains(string(out), "replay: go test -run '^TestExploreBrokenMachines$/^"+name+"$' . -kfsm.explore='") {
			t.Errorf("%s: no replay command", name)
		}
	}
	// The machine that counts its runs fails its clean run already, as not
	// at rest.
	if !regexp.MustCompile(`(?s)the clean run failed.*not at rest \(eventual stable reconciliation\).*made 1 write\(s\): patch gadgets.testing.kfsm.dev g status, with nothing changed`).Match(out) {
		t.Errorf("the restless machine was not found restless")
	}
	// The machine whose timeout path never comes to rest fails once the
	// clock jumps past its timeout, which the clean run never reaches.
	if !strings.Contains(string(out), "replay: go test -run '^TestExploreBrokenMachines$/^Expiring$' . -kfsm.explore='clock:2'") {
		t.Errorf("the expiring machine was not caught by a jump of the clock after its second step")
	}
	// The machine that invoices on every run of its Ready state fails its
	// clean run too: the resync at rest sent an invoice.
	if !regexp.MustCompile(`(?s)--- FAIL: TestExploreBrokenMachines/Dunning .*`).Match(out) ||
		!regexp.MustCompile(`caused effects outside the cluster, with nothing changed: invoices: \d+ before, \d+ after`).Match(out) {
		t.Errorf("the dunning machine was not found sending invoices at rest")
	}
	if !strings.Contains(string(out), "transitions, the clean run's | this run's:") {
		t.Errorf("no transitions beside the clean run's")
	}
	// The replay command runs that schedule again, and it fails again.
	replay := regexp.MustCompile(`replay: go test -run '(\^TestExploreBrokenMachines\$/\^GenerateName\$)' \. -kfsm.explore='([^']+)'`).FindSubmatch(out)
	if replay == nil {
		t.Fatalf("no replay command for GenerateName:\n%s", out)
	}
	again := exec.CommandContext(t.Context(), os.Args[0], "-test.run", string(replay[1]), "-test.v", "-kfsm.explore="+string(replay[2]))
	again.Env = cmd.Env
	out2, err := again.CombinedOutput()
	if err == nil || strings.Count(string(out2), "a run with ") != 1 || strings.Contains(string(out2), "explored up to") {
		t.Errorf("the replay of %s did not run that one schedule and fail:\n%s", replay[2], out2)
	}
	if t.Failed() {
		t.Logf("output of the broken machines:\n%s", out)
	}
}

// TestExploreBrokenMachines runs only inside
// TestExploreCatchesBrokenMachines.
func TestExploreBrokenMachines(t *testing.T) {
	if os.Getenv("FSMTEST_EXPLORE_BROKEN") == "" {
		t.Skip("run by TestExploreCatchesBrokenMachines in a process of its own")
	}
	// Two machines at a time (go test's -parallel), four runs each: the
	// clean run and the shrinking of one overlap the other's runs.
	for name, tc := range sloppy {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fsmtest.Explore(t, tc.machine(true), tc.scenario, fsmtest.FailFast(), fsmtest.Parallel(4))
		})
	}
	t.Run("Expiring", func(t *testing.T) {
		t.Parallel()
		fsmtest.Explore(t, expiring(true), finishInTime, fsmtest.FailFast())
	})
	t.Run("Dunning", func(t *testing.T) {
		t.Parallel()
		fsmtest.Explore(t, dunning, func(e *fsmtest.Env) {
			g := gadget()
			e.Create(g)
			e.AwaitReady(g)
		}, countInvoices)
	})
	t.Run("Restless", func(t *testing.T) {
		t.Parallel()
		fsmtest.Explore(t, restless(true), func(e *fsmtest.Env) {
			g := gadget()
			e.Create(g)
			e.AwaitReady(g)
		})
	})
}
