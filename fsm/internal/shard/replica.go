package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm/internal/fence"
	"github.com/kfsm/kfsm/fsm/internal/leancache"
)

// Options configures a replica: sharding.Options, whose fields it has.
type Options struct {
	Name, Namespace, Identity                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// The labels and annotations of the replicas' Leases and of the
// machines' children, which package fsm documents under the same names
// (a test holds the two to each other).
const (
	LabelShards        = "kfsm.dev/shards"
	AnnotationSlots    = "kfsm.dev/slots"
	AnnotationMachines = "kfsm.dev/machines"
	LabelSlot          = "kfsm.dev/slot"
)

// annotationInstance names the process that wrote a replica's Lease, and
// annotationGraphVersion the newest graph version of its machines.
const (
	annotationInstance     = "kfsm.dev/instance"
	annotationGraphVersion = "kfsm.dev/graph-version"
)

// ReplicaOf returns the replica of a sharding.Shards; package sharding
// sets it, so that only kfsm reaches a Shards' replica.
var ReplicaOf func(shards any) *Replica

// Replica is this process among the replicas of an operator that share
// its sharded machines: the work behind sharding.Shards, which spreads
// the objects of sharded machines over the replicas, so that a fleet too
// large for one process is shared by several, and never two replicas
// reconcile one object at once. sharding.New makes it, and
// fsm.Machine.Sharded gives it the machines.
//
// Each replica keeps a Lease in sharding.Options.Namespace, renewed every
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
// writes are fenced as fsm.FenceLeaderElection fences a leader's: a replica
// writes only for RenewDeadline after it last renewed its Lease, and a
// renewal fails once its Lease was deleted, so a frozen replica that wakes
// writes nothing.
//
// The cache lists and watches a sharded machine's objects with the
// API server's shard selector (Kubernetes 1.36, feature gate
// ShardedListAndWatch), so that a replica receives and decodes only the
// objects of the slots it holds or is about to hold. When its slots
// change, the cache's watches list the slots added alone and let the
// slots left go, without the informers listing again. If the API server does not honour
// the selector (the gate is off, or it is older), every replica caches
// every object and reconciles only its own: the work is still disjoint;
// kfsm logs it once and sets kfsm_shard_fallback. The machine's children
// are labelled with their parent's slot (LabelSlot) and cached by a
// label selector of the replica's slots, which every API server honours.
type Replica struct {
	o      Options
	leases coordinationclient.LeaseInterface
	fence  *fence.Fence
	lease  string // the name of this replica's Lease
	// instance tells this process's Lease apart from one that another
	// process of the same identity wrote.
	instance string
	log      logr.Logger
	m        *shardMetrics

	mu       sync.Mutex
	active   Slots // the slots whose objects this replica reconciles now
	inflight [NumSlots]int
	// epoch counts how often this replica took each slot, so that a
	// machine can tell the first reconcile of an object after a handover.
	epoch    [NumSlots]uint64
	machines []Machine
	names    []string // of the machines, for the Lease
	// graphVersion is the newest graph version of the machines: while a
	// replica of a newer one is live, this replica holds no slot.
	graphVersion int
	mgr          manager.Manager
	// What the cache selects.
	gen       uint64        // bumped whenever selected changes
	selected  Slots         // what the cache lists and watches
	changed   chan struct{} // closed when selected changes
	resources []*Resource
	lists     []*reselecting // of the cache's informers

	// The membership's own state, touched by its loop only.
	held     Slots           // listed in this replica's Lease
	assigned Slots           // what the rule gives this replica
	previous Slots           // what it gave at the look before
	freed    Slots           // what expired Leases held, at the last look
	others   Slots           // what the other Leases hold
	version  string          // of this replica's Lease, as last written
	aside    bool            // a replica of a newer graph version is live
	seen     map[string]seen // the other Leases, by name
	waiting  map[int][]<-chan struct{}
	// notBefore is when this replica may claim slots, after it deleted an
	// earlier Lease of its identity.
	notBefore time.Time
	uid       types.UID // of this replica's Lease, as created
}

// seen is what a replica knows of another's Lease.
type seen struct {
	version      string
	holder       string
	graphVersion int
	slots        Slots
	changed      time.Time // when this replica saw the version change
	gone         bool      // deleted
	duration     time.Duration
}

// Machine is a machine's side of the sharding: its reconciler, which
// Join registers.
type Machine interface {
	// Gained queues the objects of the slots; it is called once the
	// cache holds them.
	Gained(ctx context.Context, s Slots)
	// Released forgets the objects of the slots and cancels their
	// actions; the channels, by slot, close once the actions have ended.
	Released(s Slots) map[int][]<-chan struct{}
}

// NewReplica is sharding.New: it prepares cfg and opts, before
// manager.New, to run sharded machines.
func NewReplica(cfg *rest.Config, opts *manager.Options, o Options) (*Replica, error) {
	o.LeaseDuration = cmp.Or(o.LeaseDuration, 15*time.Second)
	o.RenewDeadline = cmp.Or(o.RenewDeadline, 10*time.Second)
	o.RetryPeriod = cmp.Or(o.RetryPeriod, 2*time.Second)
	switch {
	case len(validation.IsDNS1123Label(o.Name)) > 0:
		return nil, fmt.Errorf("fsm: shards: name %q is not a DNS label", o.Name)
	case o.Namespace == "":
		return nil, errors.New("fsm: shards: give the namespace of the replicas' Leases")
	case o.RenewDeadline >= o.LeaseDuration:
		return nil, fmt.Errorf("fsm: shards: RenewDeadline %v must be shorter than LeaseDuration %v", o.RenewDeadline, o.LeaseDuration)
	case o.RetryPeriod >= o.RenewDeadline:
		return nil, fmt.Errorf("fsm: shards: RetryPeriod %v must be shorter than RenewDeadline %v", o.RetryPeriod, o.RenewDeadline)
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("fsm: shards: %w", err)
		}
		o.Identity = host + "_" + string(uuid.NewUUID())
	}
	// The Lease's client writes without the fence: the Lease protects
	// itself with its resourceVersion, and the fence learns from it.
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.Timeout = max(o.RenewDeadline/2, time.Second)
	cs, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		return nil, fmt.Errorf("fsm: shards: %w", err)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(o.Identity))
	s := &Replica{
		o:        o,
		leases:   cs.CoordinationV1().Leases(o.Namespace),
		fence:    fence.New(o.RenewDeadline, "its shard Lease "+o.Namespace+"/"+o.Name, true),
		lease:    fmt.Sprintf("%s-%08x", o.Name, h.Sum32()),
		instance: string(uuid.NewUUID()),
		log:      logf.Log.WithName("kfsm").WithValues("shards", o.Name, "replica", o.Identity),
		m:        newShardMetrics(o.Name),
		seen:     map[string]seen{},
		changed:  make(chan struct{}),
	}
	cfg.Wrap(s.fence.Transport)
	newCache := opts.NewCache
	if newCache == nil {
		newCache = cache.New
	}
	opts.NewCache = func(cfg *rest.Config, co cache.Options) (cache.Cache, error) {
		cfg = rest.CopyConfig(cfg)
		if co.HTTPClient != nil {
			hc := *co.HTTPClient
			hc.Transport = s.selecting(hc.Transport)
			co.HTTPClient = &hc
		} else {
			cfg.Wrap(s.selecting)
		}
		newInformer := co.NewInformer
		if newInformer == nil {
			newInformer = toolscache.NewSharedIndexInformer
		}
		scheme := cmp.Or(co.Scheme, clientgoscheme.Scheme)
		co.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
			informer := func(lw toolscache.ListerWatcher) toolscache.SharedIndexInformer {
				return newInformer(lw, obj, resync, indexers)
			}
			gvk, err := apiutil.GVKForObject(obj, scheme)
			if err != nil {
				return informer(lw)
			}
			return s.reselect(lw, obj, gvk, informer)
		}
		c, err := newCache(cfg, co)
		return leancache.Scoped(c, co), err
	}
	return s, nil
}

// Identity returns the name of this replica.
func (s *Replica) Identity() string { return s.o.Identity }

// Join registers a machine, whose graph is at graphVersion and whose
// resources these are, with the replica, and the replica with mgr.
func (s *Replica) Join(mgr manager.Manager, name string, graphVersion int, resources []*Resource, m Machine) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.mgr == nil:
		if err := mgr.Add(s); err != nil {
			return err
		}
		s.mgr = mgr
	case s.mgr != mgr:
		return errors.New("the Shards serve another manager: make one Shards per manager")
	}
	s.machines = append(s.machines, m)
	s.names = append(s.names, name)
	s.graphVersion = max(s.graphVersion, graphVersion)
	for _, r := range resources {
		if !slices.ContainsFunc(s.resources, func(x *Resource) bool { return x.prefix == r.prefix && x.resource == r.resource }) {
			s.resources = append(s.resources, r)
		}
	}
	return nil
}

// NeedLeaderElection says that every replica takes part.
func (s *Replica) NeedLeaderElection() bool { return false }

// Start keeps this replica's Lease and slots until ctx ends, then gives
// its slots up and deletes its Lease.
func (s *Replica) Start(ctx context.Context) error {
	s.log.Info("joining the replicas of the sharded machines", "lease", s.o.Namespace+"/"+s.lease)
	for {
		if err := s.look(ctx); err != nil && ctx.Err() == nil {
			s.log.Error(err, "renewing the shard Lease")
		}
		if !s.pause(ctx) {
			s.leave()
			return nil
		}
	}
}

// pause waits until the next look, and reports false if ctx ended
// first. The next look comes a RetryPeriod later (jittered, so that
// replicas started together spread out), or sooner: when another's Lease
// expires, so that its slots move as soon as they may; and, when this
// look found Leases expired, once the cache holds the objects of their
// slots, which the next look claims.
func (s *Replica) pause(ctx context.Context) bool {
	now := time.Now()
	next := now.Add(s.o.RetryPeriod - time.Duration(rand.Int64N(int64(s.o.RetryPeriod/5))))
	for _, l := range s.seen {
		if at := l.changed.Add(l.duration); at.After(now) && at.Before(next) {
			next = at
		}
	}
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	for {
		wait := time.Until(next)
		if s.freed != 0 {
			if s.cached(gen) {
				return ctx.Err() == nil
			}
			wait = min(wait, 10*time.Millisecond)
		}
		if wait <= 0 {
			return ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// Enter starts a reconcile of an object with uid, if this replica holds
// its slot; it returns the slot, for exit, and the slot's epoch. When the
// slot is this replica's but its Lease has gone unrenewed too long to
// write, it returns a time to try again after.
func (s *Replica) Enter(uid types.UID) (slot int, epoch uint64, retry time.Duration, ok bool) {
	slot = SlotOf(uid)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.active.Has(slot):
		return slot, 0, 0, false
	case !s.fence.Open():
		return slot, 0, s.o.RetryPeriod, false
	}
	s.inflight[slot]++
	return slot, s.epoch[slot], 0, true
}

// Epochs returns how often this replica took each slot.
func (s *Replica) Epochs() [NumSlots]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Exit ends a reconcile that Enter started.
func (s *Replica) Exit(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight[slot]--
}

// setSelector makes the cache select the slots; if they changed, its
// watches take the difference in (see reselecting).
func (s *Replica) setSelector(want Slots) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if want == s.selected {
		return
	}
	s.selected = want
	s.gen++
	close(s.changed)
	s.changed = make(chan struct{})
	s.log.V(1).Info("the cache selects other slots", "slots", want.String())
}

// selection returns what the cache selects, the generation of that
// selection, and a channel closed when it changes.
func (s *Replica) selection() (gen uint64, selected Slots, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, s.selected, s.changed
}
