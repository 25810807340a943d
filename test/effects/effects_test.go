//go:build linux

package effects_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/proctest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

var (
	rounds   = flag.Int("effects.rounds", 1, "rounds of each crash point and mode")
	gadgets  = flag.Int("effects.gadgets", 10, "gadgets, and so orders, of each round")
	parallel = flag.Int("effects.parallel", 2, "rounds that run at once")
)

// The timing the replicas of the handover rounds run with.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = time.Second
)

const (
	// machine names the operator's machine and its replicas' group.
	machine = "effects"
	// within bounds every wait of a round: for a process to start and
	// die, for the gadgets to converge, for the slots to move.
	within = 2 * time.Minute
)

// The operator's crash points; the service's are beforeEffect and
// afterEffect. sigkill is the test's SIGKILL at a random moment, and
// handover a shard slot handed over while charges are open.
const (
	beforeIntent  = "before-intent"
	afterIntent   = "after-intent"
	beforeOutcome = "before-outcome"
	sigkill       = "sigkill"
	handover      = "handover"
)

// points are the crash points, in the order the summary lists them.
var points = []string{beforeIntent, afterIntent, beforeEffect, afterEffect, beforeOutcome, sigkill, lostAnswer, timeout, handover}

// mode is how the operator resumes an interrupted charge, and whether the
// service honours idempotency keys: Observe is for a service that does
// not.
type mode struct {
	name string // the operator's -mode
	keys bool
}

var modes = []mode{{"keys", true}, {"observe", false}, {"neither", false}}

func (m mode) service() string {
	if m.keys {
		return "keys"
	}
	return "nokeys"
}

// TestEachEffectOnce kills operator processes at every point of a
// charge's life and counts the charges that the payment service made:
// exactly one per order when the action declares Idempotent or Observe,
// at most one, and the gadget Stalled rather than charged twice, when it
// declares neither.
func TestEachEffectOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("the operator processes are killed and their charges counted without -short")
	}
	bin := proctest.Build(t, "./internal/operator")
	var sum tally
	sem := make(chan struct{}, max(*parallel, 1))
	t.Run("Rounds", func(t *testing.T) {
		for i := range *rounds {
			for _, point := range points {
				for _, m := range modes {
					if (point == handover || point == lostAnswer || point == timeout) && m.name == "neither" {
						// Nothing to compare: no handover without
						// a resume, and a failed charge without a
						// key or an Observe is charged again.
						continue
					}
					t.Run(fmt.Sprintf("%s/%s/%d", m.name, point, i+1), func(t *testing.T) {
						t.Parallel()
						sem <- struct{}{}
						t.Cleanup(func() { <-sem }) // the last cleanup: after the processes are gone
						r := newRound(t, m, point)
						defer sum.add(r)
						switch point {
						case handover:
							r.handover(bin)
							return
						case lostAnswer, timeout:
							r.lose(bin)
							return
						}
						r.crash(bin)
					})
				}
			}
		}
	})
	sum.report(t)
}

// round is one round: a namespace, a service and G gadgets, each an
// order to charge once.
type round struct {
	t     *testing.T
	env   *fsmtest.Env
	mode  mode
	point string
	svc   *service
	flags operatorFlags
	names []string
	procs []*process
	// crashed is the gadget whose charge reached the crash point.
	crashed string
	row     row
}

func newRound(t *testing.T, m mode, point string) *round {
	t.Helper()
	env := fsmtest.New(t)
	svc := newService(t, m.keys)
	if m.name == "observe" {
		// kfsm asks again after a backoff, and charges nothing meanwhile.
		svc.answerUnsure()
	}
	r := &round{t: t, env: env, mode: m, point: point, svc: svc, row: row{rounds: 1}}
	r.flags = operatorFlags{kubeconfig: proctest.Kubeconfig(t, env.Config()), namespace: env.Namespace, service: svc.URL(), mode: m.name}
	for i := range *gadgets {
		r.names = append(r.names, fmt.Sprintf("order-%02d", i+1))
	}
	return r
}

// violation fails the round, and counts.
func (r *round) violation(format string, args ...any) {
	r.t.Helper()
	r.row.violations++
	r.t.Errorf(format, args...)
}

// start starts an operator process.
func (r *round) start(bin, name string, flags operatorFlags, mayDie bool) *process {
	r.t.Helper()
	p := startOperator(r.t, bin, name, flags, mayDie)
	r.procs = append(r.procs, p)
	return p
}

// crash runs a round with a crash point: process a dies there, and b,
// started once the service is quiet, finishes the charges.
func (r *round) crash(bin string) {
	t := r.t
	flags := r.flags
	switch r.point {
	case beforeEffect, afterEffect:
	case sigkill:
		r.svc.delayAnswers()
	default:
		flags.crash = r.point
	}
	a := r.start(bin, "a", flags, true)
	if r.point == beforeEffect || r.point == afterEffect {
		r.svc.arm(r.point, a.Kill)
	}
	r.create()
	if r.point == sigkill {
		select {
		case <-r.svc.firstPost:
		case <-time.After(within):
			t.Fatalf("the service received no charge within %v", within)
		}
		time.Sleep(rand.N(300 * time.Millisecond))
		a.Kill()
		t.Logf("a killed once the service was asked for %d charges, %d of which a had seen succeed", r.svc.asked(), len(a.said("charged")))
	}
	a.WaitExit(within)
	switch r.point {
	case beforeEffect, afterEffect:
		r.crashed = r.svc.first()
	case sigkill:
	default:
		said := a.said("crash")
		if len(said) != 1 || said[0].detail != r.point {
			t.Fatalf("a died having said %v, want that one gadget reached %s", said, r.point)
		}
		r.crashed = said[0].gadget
	}
	// Observe can tell only what has arrived: b starts once what a sent
	// before it died has.
	r.svc.waitQuiet(within)
	r.start(bin, "b", r.flags, false)
	r.check(r.converge())
}

// lose runs a round in which the service applies the first charge it
// receives and loses its answer: a 500, or no answer until process a's
// request times out. The charge's work fails, and a retries it.
func (r *round) lose(bin string) {
	flags := r.flags
	if r.point == timeout {
		flags.callTimeout = time.Second
	}
	r.svc.arm(r.point, nil)
	a := r.start(bin, "a", flags, false)
	r.create()
	gs := r.converge()
	r.crashed = r.svc.first()
	r.check(gs)
	if posts := r.svc.postsOf(r.crashed); r.mode.name == "keys" && posts < 2 {
		r.violation("%s's first charge lost its answer, and it was asked for %d times, want again under its key", r.crashed, posts)
	}
	if q := len(a.said("observe")); r.mode.name == "observe" && q == 0 {
		r.violation("%s's first charge lost its answer, and a did not ask the service about it before charging again", r.crashed)
	}
}

// handover runs a round in which replica a holds every slot and charges
// every order, the service holding the charges open, until b joins and a
// hands about half the slots over: a cancels those charges, and b finds
// their records without an outcome.
func (r *round) handover(bin string) {
	t := r.t
	flags := r.flags
	flags.sharded = true
	// Which slots b takes depends on the gadgets' UIDs, which the API
	// server draws: with twice the gadgets, a round in which none falls in
	// b's half, and so none is handed over, comes about once in a million
	// rounds rather than once in a thousand.
	for i := len(r.names); i < 2**gadgets; i++ {
		r.names = append(r.names, fmt.Sprintf("order-%02d", i+1))
	}
	r.svc.hold()
	r.start(bin, "a", flags, false)
	r.create()
	// Every charge is made before b starts: Observe can tell only what
	// has arrived.
	r.svc.waitPosts(len(r.names), within)
	b := r.start(bin, "b", flags, false)
	uids := r.uids()
	eventually(t, within, "b to hold the slot of a gadget", func() bool {
		holder := r.holders()
		return slices.ContainsFunc(uids, func(uid types.UID) bool { return holder(uid) == "b" })
	})
	r.svc.release()
	r.check(r.converge())

	holder, moved := r.holders(), 0
	for _, uid := range uids {
		if holder(uid) == "b" {
			moved++
		}
	}
	charged, resumed := b.said("charged"), 0
	for _, e := range append(b.said("post"), b.said("observe")...) {
		if e.what == "post" || strings.HasSuffix(e.detail, ",found=1") {
			resumed++
		}
	}
	t.Logf("b holds the slots of %d of the %d gadgets, charged %d and resumed %d of a's charges", moved, len(uids), len(charged), resumed)
	if len(charged) == 0 {
		r.violation("b charged no gadget, want those of the slots it took")
	}
	if resumed == 0 {
		r.violation("b resumed none of the charges that a gave up: it should find their records without an outcome")
	}
}

// create creates the round's gadgets at once.
func (r *round) create() {
	r.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(r.names))
	for i, name := range r.names {
		wg.Go(func() {
			errs[i] = r.env.Client.Create(r.t.Context(), &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.env.Namespace}})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			r.t.Fatalf("creating the gadgets: %v", err)
		}
	}
}

// list reads the round's gadgets.
func (r *round) list() []v1alpha1.Gadget {
	r.t.Helper()
	var gs v1alpha1.GadgetList
	if err := r.env.Client.List(r.t.Context(), &gs, client.InNamespace(r.env.Namespace)); err != nil {
		r.t.Fatal(err)
	}
	return gs.Items
}

func (r *round) uids() []types.UID {
	r.t.Helper()
	var out []types.UID
	for _, g := range r.list() {
		out = append(out, g.UID)
	}
	return out
}

// holders reads who holds each gadget's slot, from the replicas' Leases.
func (r *round) holders() func(types.UID) string {
	r.t.Helper()
	var leases coordinationv1.LeaseList
	if err := r.env.Client.List(r.t.Context(), &leases, client.InNamespace(r.env.Namespace), client.MatchingLabels{sharding.LabelShards: machine}); err != nil {
		r.t.Fatal(err)
	}
	holder, _ := sharding.Holders(leases.Items, machine)
	return holder
}

// converge waits until every gadget rests: Charged, or in mode neither
// Stalled. It returns them once the service is quiet.
func (r *round) converge() []v1alpha1.Gadget {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		gs := r.list()
		var pending []string
		for _, g := range gs {
			switch {
			case charged(&g):
			case stalled(&g) && r.mode.name != "neither":
				r.violation("%s is Stalled in mode %s: %s", g.Name, r.mode.name, describe(&g))
				r.t.FailNow()
			case !stalled(&g):
				pending = append(pending, describe(&g))
			}
		}
		if len(gs) == len(r.names) && len(pending) == 0 {
			r.svc.waitQuiet(within)
			return r.list()
		}
		for _, p := range r.procs {
			if !p.mayDie && p.Exited() {
				r.t.Fatalf("%s died while %d gadgets had yet to rest", p.Name, len(pending))
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after %v, %d of %d gadgets have yet to rest: %s", within, len(pending), len(gs), strings.Join(pending, "; "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func charged(g *v1alpha1.Gadget) bool {
	return g.Status.State == "Charged" && meta.IsStatusConditionTrue(g.Status.Conditions, fsm.ConditionReady)
}

func stalled(g *v1alpha1.Gadget) bool {
	return meta.IsStatusConditionTrue(g.Status.Conditions, fsm.ConditionStalled)
}

func describe(g *v1alpha1.Gadget) string {
	var conds []string
	for _, c := range g.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return fmt.Sprintf("%s in %q (%s), note %q, %d action records", g.Name, g.Status.State, strings.Join(conds, ","), g.Status.Note, len(g.Status.Actions))
}
