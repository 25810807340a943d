package moose_test

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/examples/moose"
	"github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/doccheck"
)

func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDs:        []fs.FS{moose.CRDs},
		Roles:       []fs.FS{moose.Role},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		MinCoverage: 100,
	})
}

// herd is the moose machine of one operator process, on e's clock: a new
// Herd with nothing in memory, whose every look around makes a friend
// with the given chance.
func herd(e *fsmtest.Env, friendChance float64) *fsm.Machine[*v1alpha1.Moose] {
	h := moose.NewHerd(1)
	h.FriendChance = friendChance
	return h.Machine().WithClock(e.Clock)
}

func newMoose(name string, weight int32) *v1alpha1.Moose {
	return &v1alpha1.Moose{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MooseSpec{Weight: weight}}
}

// friends reads m and returns its friends.
func friends(e *fsmtest.Env, m *v1alpha1.Moose) []string {
	e.Get(m)
	return m.Status.Friends
}

// awaitFriends waits until every moose lists the others as its friends.
func awaitFriends(e *fsmtest.Env, herd ...*v1alpha1.Moose) {
	e.T.Helper()
	e.Await("every moose to be friends with the others", func() bool {
		for _, m := range herd {
			var others []string
			for _, o := range herd {
				if o != m {
					others = append(others, o.Name)
				}
			}
			if !cmp.Equal(friends(e, m), others) {
				return false
			}
		}
		return true
	})
}

// wakesIn is when the clock runs obj again, as its latest reconcile asked.
func wakesIn(e *fsmtest.Env, m *v1alpha1.Moose) time.Duration {
	walks := e.Walks(m)
	if len(walks) == 0 {
		return 0
	}
	return walks[len(walks)-1].RequeueAfter
}

// path lists the states m entered and when, from the clock's Epoch.
func path(m *v1alpha1.Moose) []string {
	var out []string
	for _, tr := range m.Status.History {
		out = append(out, fmt.Sprintf("%s at %v", tr.To, tr.Time.Sub(fsmtest.Epoch)))
	}
	return out
}

func TestMooseWalksItsCycleAndMakesFriends(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, herd(e, 1))
	mabel, milo := newMoose("mabel", 200), newMoose("milo", 600)
	e.Create(mabel)
	e.Create(milo)

	// Tagged, each roams and, looking around, meets the only other moose:
	// the friendship shows on both sides.
	e.AwaitState(mabel, moose.Roaming)
	e.AwaitState(milo, moose.Roaming)
	awaitFriends(e, mabel, milo)

	// Milo (600 kg) roams for 10 s, looking around every 3 s, then eats
	// for 5 s and sleeps for 8 s: the clock wakes him when a phase ends,
	// and not before.
	if got := moose.RoamFor(600); got != 10*time.Second {
		t.Fatalf("RoamFor(600) = %v, want 10s", got)
	}
	for _, phase := range []struct {
		after   time.Duration
		state   fsm.State
		wakesIn time.Duration
	}{
		{9 * time.Second, moose.Roaming, time.Second},
		{time.Second, moose.Eating, 5 * time.Second},
		{5 * time.Second, moose.Sleeping, 8 * time.Second},
		{8 * time.Second, moose.Roaming, 3 * time.Second},
	} {
		e.Clock.Step(phase.after)
		e.Await(fmt.Sprintf("milo to be %s, woken again in %v", phase.state, phase.wakesIn), func() bool {
			return e.State(milo) == phase.state && wakesIn(e, milo) == phase.wakesIn
		})
	}
	want := []string{"Tagged at 0s", "Roaming at 0s", "Eating at 10s", "Sleeping at 15s", "Roaming at 23s"}
	if diff := cmp.Diff(want, path(milo)); diff != "" {
		t.Errorf("milo's path (-want +got):\n%s", diff)
	}
	if milo.Status.Meals != 1 {
		t.Errorf("milo ate %d times, want 1", milo.Status.Meals)
	}

	// Mabel (200 kg) roams for 30 s: lighter moose get hungry later.
	e.Clock.Step(7 * time.Second)
	e.AwaitState(mabel, moose.Eating)
	want = []string{"Tagged at 0s", "Roaming at 0s", "Eating at 30s"}
	if diff := cmp.Diff(want, path(mabel)); diff != "" {
		t.Errorf("mabel's path (-want +got):\n%s", diff)
	}
}

func TestReleasedMooseVanishesAndIsForgotten(t *testing.T) {
	e := fsmtest.New(t)
	chance := 1.0
	op := fsmtest.RunFunc(e, func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Moose] { return herd(e, chance) })
	mabel, milo := newMoose("mabel", 300), newMoose("milo", 300)
	e.Create(mabel)
	e.Create(milo)
	awaitFriends(e, mabel, milo)

	// A new operator process, with a new herd that makes no friends by
	// chance: the friendship can only come back from the moose's status.
	chance = 0
	seen := e.Runs(milo, moose.Roaming)
	op.Restart()
	e.Await("the new operator to look at milo", func() bool { return e.Runs(milo, moose.Roaming) > seen })
	if got := friends(e, milo); !cmp.Equal(got, []string{"mabel"}) {
		t.Fatalf("after a restart milo's friends are %v, want mabel", got)
	}

	e.Delete(milo)
	e.AwaitGone(milo)
	if got := e.Transitions(milo); got[len(got)-1] != "delete→Released" {
		t.Errorf("milo's transitions %v end without his release", got)
	}
	e.Await("mabel to forget milo", func() bool { return len(friends(e, mabel)) == 0 })
}

func TestMooseNamesMustStartWithM(t *testing.T) {
	e := fsmtest.New(t)
	create := func(m *v1alpha1.Moose) error {
		m.Namespace = e.Namespace
		return e.Client.Create(t.Context(), m)
	}
	err := create(newMoose("george", 400))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `a moose's name must start with "m"`) {
		t.Errorf("creating george = %v, want refused because the name does not start with m", err)
	}
	for _, w := range []int32{49, 1001} {
		if err := create(newMoose(fmt.Sprintf("moose-%d", w), w)); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.weight") {
			t.Errorf("a moose of %d kg = %v, want refused naming spec.weight", w, err)
		}
	}
}

func TestKubectlShowsThePrinterColumns(t *testing.T) {
	e := fsmtest.New(t)
	fsmtest.Run(e, herd(e, 1))
	mabel := newMoose("mabel", 300)
	e.Create(mabel)
	e.AwaitState(mabel, moose.Roaming)

	out, err := e.Kubectl("get", "moose")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); !cmp.Equal(got, []string{"NAME", "STATE", "READY", "REASON", "FRIENDS", "AGE"}) {
		t.Errorf("columns %v, want NAME STATE READY REASON FRIENDS AGE", got)
	}
	if len(lines) != 2 {
		t.Fatalf("kubectl get moose printed:\n%s", out)
	}
	// A roaming moose waits: Ready is False, with the reason its handler gave.
	if got := strings.Fields(lines[1]); len(got) < 4 || !cmp.Equal(got[:4], []string{"mabel", "Roaming", "False", "Roaming"}) {
		t.Errorf("kubectl get moose printed:\n%s\nwant the row to begin mabel Roaming False Roaming", out)
	}
}

// A moose's life under every combination of faults that fsmtest explores
// (two at a time with -kfsm.depth=2, as make explore runs it): milo, who
// makes friends with mabel, is fed twice (heavier, he gets hungry
// sooner), roams, eats, sleeps and is released, and mabel forgets him.
func TestMooseSurvivesFaults(t *testing.T) {
	machine, scenario, opts := underFaults(t)
	fsmtest.Explore(t, machine, scenario, opts...)
}

// underFaults is the machine, the main scenario and the options of the
// fault tests: TestMooseSurvivesFaults's, and the seeded-bug check's.
func underFaults(*testing.T) (func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Moose], func(*fsmtest.Env), []fsmtest.FaultOption) {
	return func(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Moose] { return herd(e, 1) }, func(e *fsmtest.Env) {
		mabel, milo := newMoose("mabel", 200), newMoose("milo", 200)
		e.Create(mabel)
		e.Create(milo)
		awaitFriends(e, mabel, milo)
		for _, weight := range []int32{300, 600} {
			e.Update(milo, func() { milo.Spec.Weight = weight })
			e.AwaitCondition(milo, fsm.ConditionReconciling, metav1.ConditionTrue)
		}
		e.Clock.Step(10 * time.Second)
		e.AwaitState(milo, moose.Eating)
		e.Clock.Step(5 * time.Second)
		e.AwaitState(milo, moose.Sleeping)
		e.Delete(milo)
		e.AwaitGone(milo)
		e.Await("mabel to forget milo", func() bool { return len(friends(e, mabel)) == 0 })
	}, nil
}

func TestReadmeDiagramIsCurrent(t *testing.T) {
	doccheck.ReadmeHasDiagram(t, moose.NewHerd(1).Machine().Graph().Mermaid())
}
