// Command operator is the operator that package rollout runs as two
// processes of two versions at once, to test a rolling update of a
// machine's graph: one kfsm machine, "rollout", over the Gadgets of one
// namespace, under a controller-runtime manager.
//
// -version 1 runs version 1 of the graph: Start moves a gadget by its
// spec.target to Old (1), Both (2), Gone (3) or Kept (4). -version 2 runs
// version 2, which renames Old to New, splits Both into Left (a name
// whose last byte is even) and Right (odd), removes Gone into Kept, and
// adds Added (5). Every state but Start rests: its handler increments
// status.count, writes the process's identity into status.note and waits
// -tick, so that the process that owns a gadget writes its status every
// tick.
//
// With -mode leader the process elects a leader on a Lease, behind kfsm's
// fence (fsm.FenceLeaderElection), and releases the Lease when it stops;
// with -mode sharded it is a replica of the group "rollout"
// (sharding.New), without leader election.
//
// The metrics endpoint (-metrics-addr) serves controller-runtime's
// registry, with kfsm's metrics. Every request carries the identity in
// its User-Agent. The process exits with status 0 when SIGTERM or SIGINT
// stops it.
//
// -ignore-newer is a fault for the tests' negative controls: the cache
// forgets every gadget's status.graphVersion, so that a process of
// version 1 cannot tell that a newer one wrote the gadget, and acts on it.
package main

import (
	"context"
	"flag"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
	"github.com/kfsm/kfsm/test/internal/testoperator"
)

// The states of both versions.
const (
	Start fsm.State = "Start"
	// Version 1's.
	Old  fsm.State = "Old"
	Both fsm.State = "Both"
	Gone fsm.State = "Gone"
	Kept fsm.State = "Kept" // and version 2's
	// Version 2's.
	New   fsm.State = "New"
	Left  fsm.State = "Left"
	Right fsm.State = "Right"
	Added fsm.State = "Added"
)

// The modes of the process.
const (
	Leader  = "leader"
	Sharded = "sharded"
)

type options struct {
	*testoperator.Process
	mode        string
	version     int
	tick        time.Duration
	ignoreNewer bool
}

func main() {
	o := options{Process: testoperator.Flags()}
	flag.IntVar(&o.version, "version", 1, "the version of the graph that the process runs: 1 or 2")
	flag.StringVar(&o.mode, "mode", Leader, "leader (elect a leader on a Lease) or sharded (share the gadgets with sharding.New)")
	flag.StringVar(&o.MetricsAddr, "metrics-addr", "0", "host:port of the metrics endpoint; 0 serves none")
	flag.DurationVar(&o.tick, "tick", 300*time.Millisecond, "how often a resting gadget's status is written")
	flag.BoolVar(&o.ignoreNewer, "ignore-newer", false, "a fault: forget status.graphVersion in the cache, so that no gadget looks newer")
	flag.Parse()
	switch {
	case o.Identity == "" || o.Namespace == "":
		testoperator.Usage("-identity and -namespace are required")
	case o.version != 1 && o.version != 2:
		testoperator.Usage("-version %d is neither 1 nor 2", o.version)
	case o.mode != Leader && o.mode != Sharded:
		testoperator.Usage("-mode %q is neither %s nor %s", o.mode, Leader, Sharded)
	}
	testoperator.Main(func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o options) error {
	cfg, opts, err := o.Setup("rollout")
	if err != nil {
		return err
	}
	if o.ignoreNewer {
		opts.Cache.ByObject = map[client.Object]cache.ByObject{&v1alpha1.Gadget{}: {Transform: forgetGraphVersion}}
	}
	var shards *sharding.Shards
	switch o.mode {
	case Leader:
		err = o.Leader(cfg, &opts, "rollout", true)
	case Sharded:
		shards, err = o.Shards(cfg, &opts, "rollout")
	}
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	h := &handlers{identity: o.Identity, tick: o.tick}
	m := versionOne(h)
	if o.version == 2 {
		m = versionTwo(h)
	}
	if shards != nil {
		m = m.Sharded(shards)
	}
	if err := m.PublishGraph(false).SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// versionOne is the graph as it was.
func versionOne(h *handlers) *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("rollout", fsm.Lifecycle).
		Initial(Start).
		State(Start, h.sort(map[int32]fsm.State{1: Old, 2: Both, 3: Gone, 4: Kept}), fsm.To(Old, Both, Gone, Kept)).
		State(Old, h.rest, fsm.Final()).
		State(Both, h.rest, fsm.Final()).
		State(Gone, h.rest, fsm.Final()).
		State(Kept, h.rest, fsm.Final())
}

// versionTwo is the graph as version 2 made it from version 1.
func versionTwo(h *handlers) *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("rollout", fsm.Lifecycle).
		Initial(Start).
		State(Start, h.sort(map[int32]fsm.State{1: New, 2: Left, 3: Kept, 4: Kept, 5: Added}), fsm.To(New, Left, Right, Kept, Added)).
		State(New, h.rest, fsm.Final()).
		State(Left, h.rest, fsm.Final()).
		State(Right, h.rest, fsm.Final()).
		State(Kept, h.rest, fsm.Final()).
		State(Added, h.rest, fsm.Final()).
		Version(2,
			fsm.Rename(Old, New),
			fsm.Split(Both, side),
			fsm.Remove(Gone, Kept))
}

// side is where version 2 puts a gadget of Both: Left or Right by the
// parity of its name's last byte.
func side(g *v1alpha1.Gadget) fsm.State {
	if g.Name[len(g.Name)-1]%2 == 0 {
		return Left
	}
	return Right
}

// handlers holds the machine's handlers.
type handlers struct {
	identity string
	tick     time.Duration
}

// sort moves a gadget from Start to the state its target names; Left
// stands for either side of the split. A target without a state waits
// for a new spec.
func (h *handlers) sort(states map[int32]fsm.State) fsm.Handler[*v1alpha1.Gadget] {
	return func(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
		s, ok := states[r.Object.Spec.Target]
		switch {
		case !ok:
			return fsm.Wait(0, "NoStateForTarget")
		case s == Left:
			return fsm.Next(side(r.Object))
		}
		return fsm.Next(s)
	}
}

// rest writes the status every tick: the owner's heartbeat, as the API
// server sees it.
func (h *handlers) rest(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
	r.Object.Status.Count++
	r.Object.Status.Note = h.identity
	return fsm.Wait(h.tick, "Resting")
}

// forgetGraphVersion is the fault of -ignore-newer.
func forgetGraphVersion(obj any) (any, error) {
	if g, ok := obj.(*v1alpha1.Gadget); ok {
		g.Status.GraphVersion = 0
	}
	return obj, nil
}
