package fsmtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest/internal/explore"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// A write's fault strikes the write to the object it was found at,
// however the operator's writes to other objects interleave with it: on
// a loaded machine two moose's walks take turns otherwise from one run
// to the next, and a fault at milo's meal, found in the clean run, must
// strike milo's meal in the run made of it, and in its replay. A create,
// whose path has no name, counts among the writes of the object its body
// names.
func TestAWriteFaultStrikesItsObjectsWriteHoweverWritesInterleave(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"metadata":{"name":"x"}}`)
	}))
	defer api.Close()
	// run makes the writes of order, by object name, a create of
	// configmap c first, under schedule s; it returns the run's points
	// and the indexes in order of the writes that failed.
	run := func(s explore.Schedule, order ...string) ([]explore.Point, []int) {
		f := explore.Scheduled(s, 0, explore.NewTracker(explore.World{Namespace: "ns"}, false))
		tr := &transport{next: api.Client().Transport, api: newAPILog(), life: &life{faults: f, onCrash: func() {}}}
		write := func(method, path, body string) error {
			req, err := http.NewRequest(method, api.URL+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/merge-patch+json")
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}
		if err := write(http.MethodPost, "/api/v1/namespaces/ns/configmaps", `{"metadata":{"name":"c"}}`); err != nil {
			t.Fatalf("the create failed: %v", err)
		}
		var failed []int
		for i, name := range order {
			if write(http.MethodPatch, "/apis/example.dev/v1/namespaces/ns/moose/"+name+"/status", `{"status":{}}`) != nil {
				failed = append(failed, i)
			}
		}
		points, _ := f.Trace().Result()
		return points, failed
	}

	clean, _ := run(nil, "mabel", "milo", "milo", "mabel")
	if got := clean[0].Atoms[0].String(); got != "crash:configmaps/c:1" {
		t.Errorf("the create's crash is %s, want crash:configmaps/c:1: the object its body names, its first write", got)
	}
	var meal explore.Atom // the fault at milo's second write
	for _, p := range clean[3].Atoms {
		if p.Kind == explore.Fail {
			meal = p
		}
	}
	if got := meal.String(); got != "fail:moose/milo:2" {
		t.Errorf("the clean run's fourth write, milo's second, fails as %q, want fail:moose/milo:2", got)
	}
	// The replay: mabel's walks run ahead of milo's this time.
	if _, failed := run(explore.Schedule{meal}, "mabel", "mabel", "milo", "milo"); !slices.Equal(failed, []int{3}) {
		t.Errorf("%s failed the writes %v of mabel, mabel, milo, milo; want [3], milo's second", meal, failed)
	}
}

// A walk that the change's own watch event started may end before the
// write returns to the scenario (on a loaded machine it did): it is a walk
// after the change, which an Await after a jump of the clock waits for.
func TestAWalkThatEndsBeforeTheWriteReturnsComesAfterTheChange(t *testing.T) {
	e := &Env{Namespace: "ns", walks: &walkLog{}}
	s := &snapshots{trace: explore.NewTracker(explore.World{Namespace: "ns"}, true), holdUntil: -1}
	walks := e.walks.count()
	// The write, during which the operator walks the object.
	e.walks.walks = append(e.walks.walks, machineWalk{machine: "m", Walk: fsm.Walk{UID: "g"}})
	s.change("update Gadget/g", walks)
	if got := s.trace.SinceChange(); got != walks {
		t.Errorf("the walks after the change start at %d, want %d: the walk that its own event started would come before it", got, walks)
	}
}

// Every kind of fault belongs to a class of AllFaults or to Explore
// alone, and every class of AllFaults strikes some kind: Faults, Explore
// restricted to AllFaults, strikes each class it names.
func TestEveryFaultKindHasAClassOrIsExplores(t *testing.T) {
	struck := map[Fault]bool{}
	for _, kind := range explore.Kinds {
		class := Fault(kind.Class())
		if class == "" {
			continue
		}
		if !slices.Contains(AllFaults, class) {
			t.Errorf("%s's class %s is not in AllFaults", kind, class)
		}
		struck[class] = true
	}
	for _, class := range AllFaults {
		if !struck[class] {
			t.Errorf("no kind of fault is of class %s: Faults would strike nothing of it", class)
		}
	}
}

// The Explores of tests that run in parallel share the runs at once of
// one Explore: two of them, each free to run more than half of
// Parallel's default at once, run no more than the default together, and
// fill it. (Not parallel itself: other tests' Explores would take slots.)
func TestParallelExploresShareTheirRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("fault exploration runs without -short")
	}
	var (
		mu            sync.Mutex
		running, peak int
	)
	machine := func(*Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("slots", fsm.Lifecycle).Initial("Idle").State("Idle", nil, fsm.Final())
	}
	scenario := func(e *Env) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
		e.Create(g)
		e.AwaitReady(g)
		time.Sleep(time.Second) // so that the two Explores' runs overlap
	}
	each := defaultParallel()/2 + 1
	t.Run("Explores", func(t *testing.T) {
		for _, name := range []string{"One", "Two"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				Explore(t, machine, scenario, MaxRuns(each), Parallel(defaultParallel()))
			})
		}
	})
	if t.Failed() {
		return
	}
	alone := each // the most that one Explore runs at once
	if *exploreParallel > 0 {
		alone = min(each, *exploreParallel)
	}
	if limit := max(defaultParallel(), *exploreParallel); peak > limit || peak <= alone {
		t.Errorf("the two Explores ran %d runs at once at most, want more than one Explore's %d and at most %d", peak, alone, limit)
	}
}

// A bad option or flag fails Explore before it runs anything, naming the
// value: a misspelt class of Only or a depth of 0 would otherwise explore
// nothing and pass.
func TestExploreRefusesOptionsThatWouldExploreNothing(t *testing.T) {
	for _, tc := range []struct {
		opts  []FaultOption
		flags func()
		want  []string // parts of the error; none for good options
	}{
		{opts: []FaultOption{Only(Crash, Drift), Depth(2), Budget(time.Minute), MaxRuns(3), Parallel(2), Replicas(2), Lag(0), Converge(time.Second)}},
		{opts: []FaultOption{Only("crsh")}, want: []string{`Only("crsh"): no class of fault is so named; the classes are crash, fail-write,`}},
		{opts: []FaultOption{Only()}, want: []string{"Only() names no class of fault"}},
		{opts: []FaultOption{Depth(0)}, want: []string{"Depth(0): Explore strikes at least one fault"}},
		{opts: []FaultOption{Budget(0), MaxRuns(-1)}, want: []string{"Budget(0s)", "MaxRuns(-1)"}},
		{opts: []FaultOption{Parallel(0), Replicas(0), Lag(-time.Second), Converge(0)}, want: []string{"Parallel(0)", "Replicas(0)", "Lag(-1s)", "Converge(0s)"}},
		{flags: func() { *exploreDepth, *exploreBudget, *exploreParallel = -1, -time.Second, -2 },
			want: []string{"-kfsm.depth=-1", "-kfsm.budget=-1s", "-kfsm.parallel=-2"}},
		{opts: []FaultOption{Depth(0)}, flags: func() { *exploreDepth = 2 }, want: []string{"Depth(0)"}},
	} {
		depth, budget, parallel := *exploreDepth, *exploreBudget, *exploreParallel
		if tc.flags != nil {
			tc.flags()
		}
		_, err := exploreOptions(tc.opts)
		*exploreDepth, *exploreBudget, *exploreParallel = depth, budget, parallel
		switch {
		case len(tc.want) == 0 && err != nil:
			t.Errorf("good options: %v", err)
		case len(tc.want) > 0 && err == nil:
			t.Errorf("no error, want one naming %q", tc.want)
		}
		for _, w := range tc.want {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %q", err, w)
			}
		}
	}
}
