// Package sharding spreads the objects of a machine over the replicas of
// an operator: each replica reconciles the objects of the hash slots it
// holds, and never two replicas one object at once. It is experimental:
// its names may change before kfsm 1.0.
//
//	opts := manager.Options{...} // no leader election for the machine
//	shards, err := sharding.New(cfg, &opts, sharding.Options{Name: "moose", Namespace: podNamespace})
//	mgr, err := manager.New(cfg, opts)
//	m.Sharded(shards)
//	err = m.SetupWithManager(mgr)
//
// See [Shards] for how the replicas share the slots, and docs/scale-out.md
// for what it costs and how it fails.
package sharding

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm/internal/shard"
)

// Options configures the replicas of an operator that share its sharded
// machines; see [New].
type Options struct {
	// Name names the group: the processes that give the same Name share
	// the work. It is a DNS label, such as the operator's name.
	Name string
	// Namespace is where each replica keeps its Lease: the operator's own
	// namespace.
	Namespace string
	// Identity names this replica in its Lease; empty means the host name
	// and a UUID. Two live replicas must not share it.
	Identity string
	// LeaseDuration is how long a replica's Lease may go unrenewed before
	// the others take its slots; the default is 15 s.
	LeaseDuration time.Duration
	// RenewDeadline is how long after its last renewal a replica may still
	// write; it must be shorter than LeaseDuration. The default is 10 s.
	RenewDeadline time.Duration
	// RetryPeriod is how often a replica renews its Lease and looks at the
	// others'; it must be shorter than RenewDeadline. The default is 2 s.
	RetryPeriod time.Duration
}

// Labels and annotations of the replicas' Leases.
const (
	// LabelShards names the group of a replica's Lease.
	LabelShards = "kfsm.dev/shards"
	// AnnotationSlots lists the hash slots that a replica holds, such as
	// "0-20,42".
	AnnotationSlots = "kfsm.dev/slots"
	// AnnotationMachines lists the machines that a replica shards, such as
	// "moose,webapp".
	AnnotationMachines = "kfsm.dev/machines"
	// LabelSlot is the hash slot of a sharded machine's child's parent, so
	// that each replica's cache holds only the children of its slice.
	LabelSlot = "kfsm.dev/slot"
)

// Holders reads the Leases of sharded replicas (those labelled with
// LabelShards) and returns who holds an object of machine, by its UID:
// the identity of the replica that holds its slot, or "" if none does
// (the slot is moving, or the machine is not sharded). ok says whether
// any of the Leases shards the machine.
func Holders(leases []coordinationv1.Lease, machine string) (holder func(types.UID) string, ok bool) {
	return shard.Holders(leases, machine)
}

// NumSlots is the number of hash slots that sharded machines divide their
// objects into. An object's slot is the top six bits of the 64-bit FNV-1a
// hash of its UID, the hash that the API server's shardRange uses, so
// that a set of slots is a set of hash ranges.
const NumSlots = shard.NumSlots

// Shards spreads the objects of sharded machines over the replicas of an
// operator, so that a fleet too large for one process is shared by
// several, and never two replicas reconcile one object at once. Make it
// with [New] and give it to machines with [fsm.Machine.Sharded].
//
// Each replica keeps a Lease in Options.Namespace, renewed every
// RetryPeriod, which lists the hash slots it holds. The replicas are not
// configured: each finds the others through their Leases and derives from
// the live ones which slots it should hold, all by the same rule
// (rendezvous hashing, balanced), so that a replica joining or leaving
// moves about one share of the slots. A replica reconciles an object only
// while it holds the object's slot. It gives a slot up by letting no new
// reconcile of it start, waiting until the reconciles and actions of its
// objects have ended, and only then writing its Lease without it; it
// takes a slot by writing its Lease with the slot claimed and then
// reading the other Leases: if none lists the slot, the slot is its own,
// else it withdraws the claim and tries again later. A replica whose
// Lease went unrenewed for LeaseDuration is gone: the others delete its
// Lease (if it still has the version they saw) and take its slots. Its
// writes are fenced as [fsm.FenceLeaderElection] fences a leader's: a replica
// writes only for RenewDeadline after it last renewed its Lease, and a
// renewal fails once its Lease was deleted, so a frozen replica that wakes
// writes nothing.
//
// The cache lists and watches a sharded machine's objects with the
// API server's shard selector (Kubernetes 1.36, feature gate
// ShardedListAndWatch), so that a replica receives and decodes only the
// objects of the slots it holds or is about to hold. When its slots
// change, the cache's watches list the slots and take in what differs,
// without the informers listing again. If the API server does not honour
// the selector (the gate is off, or it is older), every replica caches
// every object and reconciles only its own: the work is still disjoint;
// kfsm logs it once and sets kfsm_shard_fallback. The machine's children
// are labelled with their parent's slot ([LabelSlot]) and cached by a
// label selector of the replica's slots, which every API server honours.
type Shards struct {
	replica *shard.Replica
}

// New prepares a manager to run sharded machines. Call it before
// manager.New with the configuration and the options that the manager
// gets: it changes both. It fences the writes made with cfg, and makes
// opts' cache list and watch only this replica's objects of each machine
// given the Shards with [fsm.Machine.Sharded]. A sharded machine's controller
// runs on every replica, without leader election.
func New(cfg *rest.Config, opts *manager.Options, o Options) (*Shards, error) {
	r, err := shard.NewReplica(cfg, opts, shard.Options(o))
	if err != nil {
		return nil, err
	}
	return &Shards{replica: r}, nil
}

// Identity returns the name of this replica.
func (s *Shards) Identity() string { return s.replica.Identity() }

// NeedLeaderElection says that every replica takes part.
func (s *Shards) NeedLeaderElection() bool { return s.replica.NeedLeaderElection() }

// Start keeps this replica's Lease and slots until ctx ends, then gives
// its slots up and deletes its Lease.
func (s *Shards) Start(ctx context.Context) error { return s.replica.Start(ctx) }

// SlotOf returns the hash slot of an object's UID, from 0 to NumSlots-1:
// the top bits of the hash that the API server's
// shardRange(object.metadata.uid, …) compares.
func SlotOf(uid types.UID) int { return shard.SlotOf(uid) }

func init() {
	// The machines reach a Shards' replica through the mechanism's
	// package, which only kfsm may import.
	shard.ReplicaOf = func(s any) *shard.Replica { return s.(*Shards).replica }
}
