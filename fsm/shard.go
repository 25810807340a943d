package fsm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kfsm/kfsm/fsm/internal/echo"
	"github.com/kfsm/kfsm/fsm/internal/fence"
)

// ShardOptions configures the replicas of an operator that share its
// sharded machines; see [NewShards].
type ShardOptions struct {
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
	// annotationInstance names the process that wrote a replica's Lease.
	annotationInstance = "kfsm.dev/instance"
)

// ShardHolders reads the Leases of sharded replicas (those labelled with
// LabelShards) and returns who holds an object of machine, by its UID:
// the identity of the replica that holds its slot, or "" if none does
// (the slot is moving, or the machine is not sharded). ok says whether
// any of the Leases shards the machine.
func ShardHolders(leases []coordinationv1.Lease, machine string) (holder func(types.UID) string, ok bool) {
	var holders [NumSlots]string
	for _, l := range leases {
		if l.Labels[LabelShards] == "" || !slices.Contains(strings.Split(l.Annotations[AnnotationMachines], ","), machine) {
			continue
		}
		ok = true
		held, err := parseSlots(l.Annotations[AnnotationSlots])
		if err != nil {
			continue
		}
		for i := range held.each() {
			holders[i] = ptr.Deref(l.Spec.HolderIdentity, "")
		}
	}
	return func(uid types.UID) string { return holders[SlotOf(uid)] }, ok
}

// NumSlots is the number of hash slots that sharded machines divide their
// objects into. An object's slot is the top six bits of the 64-bit FNV-1a
// hash of its UID, the hash that the API server's shardRange uses, so
// that a set of slots is a set of hash ranges.
const NumSlots = 64

// Shards spreads the objects of sharded machines over the replicas of an
// operator, so that a fleet too large for one process is shared by
// several, and never two replicas reconcile one object at once. Make it
// with [NewShards] and give it to machines with [Machine.Sharded].
//
// Each replica keeps a Lease in ShardOptions.Namespace, renewed every
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
// writes are fenced as [FenceLeaderElection] fences a leader's: a replica
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
	o      ShardOptions
	leases coordinationclient.LeaseInterface
	fence  *fence.Fence
	lease  string // the name of this replica's Lease
	// instance tells this process's Lease apart from one that another
	// process of the same identity wrote.
	instance string
	log      logr.Logger
	m        *shardMetrics

	mu       sync.Mutex
	active   slots // the slots whose objects this replica reconciles now
	inflight [NumSlots]int
	// epoch counts how often this replica took each slot, so that a
	// machine can tell the first reconcile of an object after a handover.
	epoch    [NumSlots]uint64
	machines []shardedMachine
	names    []string // of the machines, for the Lease
	mgr      manager.Manager
	// What the cache selects.
	gen       uint64        // bumped whenever selected changes
	selected  slots         // what the cache lists and watches
	changed   chan struct{} // closed when selected changes
	resources []*shardedResource
	lists     []*reselecting // of the cache's informers

	// The membership's own state, touched by its loop only.
	held     slots           // listed in this replica's Lease
	assigned slots           // what the rule gives this replica
	previous slots           // what it gave at the look before
	freed    slots           // what expired Leases held, at the last look
	others   slots           // what the other Leases hold
	version  string          // of this replica's Lease, as last written
	seen     map[string]seen // the other Leases, by name
	waiting  map[int][]<-chan struct{}
	// notBefore is when this replica may claim slots, after it deleted an
	// earlier Lease of its identity.
	notBefore time.Time
	uid       types.UID // of this replica's Lease, as created
}

// seen is what a replica knows of another's Lease.
type seen struct {
	version  string
	holder   string
	slots    slots
	changed  time.Time // when this replica saw the version change
	gone     bool      // deleted
	duration time.Duration
}

// shardedMachine is a machine's side of the sharding: the reconciler.
type shardedMachine interface {
	// gained queues the cached objects of the slots.
	gained(ctx context.Context, s slots)
	// released forgets the objects of the slots and cancels their
	// actions; the channels close once the actions have ended.
	released(s slots) []<-chan struct{}
}

// NewShards prepares a manager to run sharded machines. Call it before
// manager.New with the configuration and the options that the manager
// gets: it changes both. It fences the writes made with cfg, and makes
// opts' cache list and watch only this replica's objects of each machine
// given the Shards with Machine.Sharded. A sharded machine's controller
// runs on every replica, without leader election.
func NewShards(cfg *rest.Config, opts *manager.Options, o ShardOptions) (*Shards, error) {
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
	s := &Shards{
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
		scheme := co.Scheme
		if scheme == nil {
			scheme = clientgoscheme.Scheme
		}
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
		return newCache(cfg, co)
	}
	return s, nil
}

// Identity returns the name of this replica.
func (s *Shards) Identity() string { return s.o.Identity }

// join registers a machine with the Shards and the Shards with mgr.
func (s *Shards) join(mgr manager.Manager, name string, resources []*shardedResource, m shardedMachine) error {
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
	for _, r := range resources {
		if !slices.ContainsFunc(s.resources, func(x *shardedResource) bool { return x.prefix == r.prefix && x.resource == r.resource }) {
			s.resources = append(s.resources, r)
		}
	}
	return nil
}

// NeedLeaderElection says that every replica takes part.
func (s *Shards) NeedLeaderElection() bool { return false }

// Start keeps this replica's Lease and slots until ctx ends, then gives
// its slots up and deletes its Lease.
func (s *Shards) Start(ctx context.Context) error {
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
func (s *Shards) pause(ctx context.Context) bool {
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

// look renews this replica's Lease, reads the others' and acts on what
// changed: the heart of the membership.
func (s *Shards) look(ctx context.Context) error {
	// Slots that another replica should have, whose work has ended.
	if done := s.drainedOf(s.held &^ s.assigned); done != 0 {
		s.held &^= done
		s.m.handovers.WithLabelValues(s.o.Name, "released").Add(float64(done.count()))
		s.log.Info("released slots", "slots", done.String())
	}
	// A slot is claimed once the rule has given it twice in a row, so that
	// a replica that starts and sees no other yet claims nothing; or at
	// once, if an expired Lease held it.
	claims := s.assigned & (s.previous | s.freed) &^ s.held &^ s.others
	if time.Now().Before(s.notBefore) {
		claims = 0
	}
	sent, renewing := time.Now(), s.version != ""
	if err := s.renew(ctx, s.held|claims); err != nil {
		if renewing && (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) {
			// Another replica deleted the Lease, taking it for gone: its
			// slots may be another's already.
			s.log.Info("the shard Lease was taken away; giving up every slot", "reason", err.Error())
			s.fence.Hold(time.Time{})
			s.lost()
		}
		return err
	}
	s.fence.Hold(sent)
	list, err := s.leases.List(ctx, metav1.ListOptions{LabelSelector: LabelShards + "=" + s.o.Name})
	if err != nil {
		return err
	}
	// A change is seen now, after the list: never before its writer sent
	// it, which its fence counts from.
	now := time.Now()
	members := []string{s.o.Identity}
	for _, l := range list.Items {
		if l.Name == s.lease {
			continue
		}
		was, known := s.seen[l.Name]
		if !known || was.version != l.ResourceVersion {
			was = seen{version: l.ResourceVersion, changed: now}
		}
		was.gone = false
		was.holder = ptr.Deref(l.Spec.HolderIdentity, "")
		was.slots, _ = parseSlots(l.Annotations[AnnotationSlots])
		was.duration = s.o.LeaseDuration
		if d := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); d > 0 {
			was.duration = max(was.duration, time.Duration(d)*time.Second)
		}
		s.seen[l.Name] = was
	}
	var others, freed slots
	for name, l := range s.seen {
		if !slices.ContainsFunc(list.Items, func(x coordinationv1.Lease) bool { return x.Name == name }) {
			l.gone = true
			s.seen[name] = l
		}
		expired := now.Sub(l.changed) >= l.duration
		switch {
		case !l.gone && expired:
			// Gone without a word: its Lease goes, if it has not changed
			// since, and its slots with it.
			err := s.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &l.version}})
			switch {
			case err == nil || apierrors.IsNotFound(err):
				s.log.Info("a replica's Lease expired; deleted it", "lease", name, "holder", l.holder, "slots", l.slots.String())
				delete(s.seen, name)
				freed |= l.slots
			case apierrors.IsConflict(err):
				// It changed after all: look again next time.
				others |= l.slots
			default:
				others |= l.slots
				s.log.Error(err, "deleting an expired shard Lease", "lease", name)
			}
		case l.gone && expired:
			delete(s.seen, name)
			freed |= l.slots
		case l.gone:
			// Deleted by someone while it was live: its slots count until
			// its holder can no longer write.
			others |= l.slots
		default:
			others |= l.slots
			if l.holder != "" {
				members = append(members, l.holder)
			}
		}
	}
	s.others, s.freed = others, freed
	s.askAgain(ctx)
	if won := claims &^ others; won != 0 {
		s.held |= won
		s.take(ctx, won)
	}
	s.previous, s.assigned = s.assigned, assign(members)[s.o.Identity]
	// Stop starting reconciles of what is no longer this replica's; the
	// next look lets the slots go once their reconciles have ended.
	s.stop(s.held &^ s.assigned)
	// A slot given up but still held, that the rule gives back, is still
	// this replica's alone.
	s.mu.Lock()
	back := s.held & s.assigned &^ s.active
	s.mu.Unlock()
	if back != 0 {
		s.take(ctx, back)
	}
	// The cache selects what this replica holds and what it will take:
	// what it will claim at the next look, not what a passing view gave.
	s.setSelector(s.assigned&(s.previous|s.freed) | s.held)
	s.m.members.Set(float64(len(members)))
	s.m.held(s.held)
	return nil
}

// renew writes this replica's Lease listing held.
func (s *Shards) renew(ctx context.Context, held slots) error {
	now := metav1.NewMicroTime(time.Now())
	if s.version == "" {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: s.lease, Namespace: s.o.Namespace,
				Labels:      map[string]string{LabelShards: s.o.Name},
				Annotations: s.annotations(held)},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       &s.o.Identity,
				LeaseDurationSeconds: ptr.To(int32((s.o.LeaseDuration + time.Second - 1) / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		created, err := s.leases.Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// An earlier Lease of this identity, left by a crash: the
			// slots it lists may be another's by now. Once it is gone, the
			// others wait until its holder can no longer write.
			if err := s.leases.Delete(ctx, s.lease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			// Its holder may still write until it expires: claim nothing
			// before the others would take its slots.
			s.notBefore = time.Now().Add(s.o.LeaseDuration)
			return fmt.Errorf("deleted an earlier Lease %s of this replica's identity; creating it anew", s.lease)
		}
		if err != nil {
			return err
		}
		s.version, s.uid = created.ResourceVersion, created.UID
		return nil
	}
	// A patch, not an update: the API server creates a Lease that an
	// update names if it is gone, and a renewal must fail once the others
	// deleted the Lease. The resourceVersion and the UID are its
	// preconditions.
	patch := func(version string) (*coordinationv1.Lease, error) {
		body, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": version, "uid": s.uid, "annotations": s.annotations(held)},
			"spec":     map[string]any{"holderIdentity": s.o.Identity, "renewTime": now},
		})
		if err != nil {
			return nil, err
		}
		return s.leases.Patch(ctx, s.lease, types.MergePatchType, body, metav1.PatchOptions{})
	}
	updated, err := patch(s.version)
	if apierrors.IsConflict(err) {
		// A renewal whose answer was lost (a timeout, a cancel) may have
		// been written all the same. The Lease is still this replica's if
		// this process wrote it: the others never change a Lease, they
		// delete an expired one.
		if current, getErr := s.leases.Get(ctx, s.lease, metav1.GetOptions{}); getErr == nil && current.UID == s.uid && current.Annotations[annotationInstance] == s.instance {
			updated, err = patch(current.ResourceVersion)
		}
	}
	if err != nil {
		return err
	}
	s.version = updated.ResourceVersion
	return nil
}

// annotations are those of the Lease: the slots held, the machines.
func (s *Shards) annotations(held slots) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]string{AnnotationSlots: held.String(), AnnotationMachines: strings.Join(s.names, ","), annotationInstance: s.instance}
}

// lost gives up every slot at once, after the Lease was taken away.
func (s *Shards) lost() {
	s.stop(s.held | s.assigned)
	s.held, s.assigned, s.previous, s.version = 0, 0, 0, ""
	s.setSelector(0)
}

// leave gives every slot up, waits briefly for their work to end, and
// deletes the Lease, so that the others take the slots at once.
func (s *Shards) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.RenewDeadline)
	defer cancel()
	s.stop(s.held)
	left := s.held
	for ; left != 0 && ctx.Err() == nil; left &^= s.drainedOf(left) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.version == "" || !s.fence.Open() {
		return
	}
	if left != 0 {
		// Work still runs: the Lease stays, and expires.
		s.log.Info("stopping with reconciles still running; the Lease expires instead of going", "slots", left.String())
		return
	}
	if err := s.renew(ctx, 0); err != nil {
		s.log.Error(err, "giving up the shard Lease's slots")
		return
	}
	if err := s.leases.Delete(ctx, s.lease, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &s.version}}); err != nil {
		s.log.Error(err, "deleting the shard Lease")
		return
	}
	s.log.Info("left the replicas", "lease", s.o.Namespace+"/"+s.lease)
}

// take starts reconciling the objects of won.
func (s *Shards) take(ctx context.Context, won slots) {
	s.mu.Lock()
	s.active |= won
	for i := range won.each() {
		s.epoch[i]++
	}
	machines := slices.Clone(s.machines)
	s.mu.Unlock()
	s.m.handovers.WithLabelValues(s.o.Name, "gained").Add(float64(won.count()))
	s.log.Info("took slots", "slots", won.String())
	gen, _, _ := s.selection()
	go func() {
		// The cache may still be taking the slots in: the look must not
		// wait for it, and the machines must, so that they queue every
		// object of the slots.
		if !s.awaitCache(ctx, gen) {
			return
		}
		for _, m := range machines {
			m.gained(ctx, won)
		}
	}()
}

// awaitCache waits until the cache holds the objects of the selection of
// generation gen, and reports false if ctx ended first.
func (s *Shards) awaitCache(ctx context.Context, gen uint64) bool {
	for !s.cached(gen) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

// activeSlots returns the slots whose objects this replica reconciles now.
func (s *Shards) activeSlots() slots {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// stop lets no new reconcile of the slots start, and cancels their
// actions.
func (s *Shards) stop(lost slots) {
	s.mu.Lock()
	lost &= s.active
	s.active &^= lost
	machines := slices.Clone(s.machines)
	s.mu.Unlock()
	if lost == 0 {
		return
	}
	if s.waiting == nil {
		s.waiting = map[int][]<-chan struct{}{}
	}
	for _, m := range machines {
		for _, done := range m.released(lost) {
			for i := range lost.each() {
				s.waiting[i] = append(s.waiting[i], done)
			}
		}
	}
}

// drainedOf returns the slots of some whose reconciles and actions have
// ended.
func (s *Shards) drainedOf(some slots) slots {
	var done slots
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range some.each() {
		if s.active.has(i) || s.inflight[i] > 0 {
			continue
		}
		s.waiting[i] = slices.DeleteFunc(s.waiting[i], closed)
		if len(s.waiting[i]) == 0 {
			done |= 1 << i
		}
	}
	return done
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// enter starts a reconcile of an object with uid, if this replica holds
// its slot; it returns the slot, for exit, and the slot's epoch. When the
// slot is this replica's but its Lease has gone unrenewed too long to
// write, it returns a time to try again after.
func (s *Shards) enter(uid types.UID) (slot int, epoch uint64, retry time.Duration, ok bool) {
	slot = SlotOf(uid)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.active.has(slot):
		return slot, 0, 0, false
	case !s.fence.Open():
		return slot, 0, s.o.RetryPeriod, false
	}
	s.inflight[slot]++
	return slot, s.epoch[slot], 0, true
}

// exit ends a reconcile that enter started.
func (s *Shards) exit(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight[slot]--
}

// setSelector makes the cache select the slots; if they changed, its
// watches take the difference in (see reselecting).
func (s *Shards) setSelector(want slots) {
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
func (s *Shards) selection() (gen uint64, selected slots, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, s.selected, s.changed
}

// slots is a set of hash slots.
type slots uint64

func (s slots) has(i int) bool { return s&(1<<i) != 0 }
func (s slots) count() int     { return bits.OnesCount64(uint64(s)) }

func (s slots) each() func(func(int) bool) {
	return func(yield func(int) bool) {
		for rest := uint64(s); rest != 0; rest &= rest - 1 {
			if !yield(bits.TrailingZeros64(rest)) {
				return
			}
		}
	}
}

// runs returns the runs of consecutive slots, as [first, last] pairs.
func (s slots) runs() [][2]int {
	var out [][2]int
	for i := 0; i < NumSlots; i++ {
		if !s.has(i) {
			continue
		}
		j := i
		for j+1 < NumSlots && s.has(j+1) {
			j++
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

// String writes the slots as "0-20,42"; no slots is "".
func (s slots) String() string {
	var b strings.Builder
	for _, r := range s.runs() {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r[0]))
		if r[1] > r[0] {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(r[1]))
		}
	}
	return b.String()
}

// parseSlots reads what String writes.
func parseSlots(text string) (slots, error) {
	var s slots
	if text == "" {
		return 0, nil
	}
	for part := range strings.SplitSeq(text, ",") {
		from, to, isRange := strings.Cut(part, "-")
		if !isRange {
			to = from
		}
		a, errA := strconv.Atoi(from)
		b, errB := strconv.Atoi(to)
		if errA != nil || errB != nil || a < 0 || b >= NumSlots || a > b {
			return 0, fmt.Errorf("%q is not a list of slots", text)
		}
		for i := a; i <= b; i++ {
			s |= 1 << i
		}
	}
	return s, nil
}

// SlotOf returns the hash slot of an object's UID, from 0 to NumSlots-1:
// the top bits of the hash that the API server's
// shardRange(object.metadata.uid, …) compares.
func SlotOf(uid types.UID) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return int(h.Sum64() >> (64 - 6))
}

// selectorOf returns the shard selector of a set of slots. The API server
// takes no empty selector, so no slots select the one hash 0.
func selectorOf(s slots) string {
	runs := s.runs()
	if len(runs) == 0 {
		return shardRange(0, 1)
	}
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = shardRange(uint64(r[0])<<58, uint64(r[1]+1)<<58)
	}
	return strings.Join(parts, " || ")
}

// childSelector returns the label selector of the children of the
// objects in the slots: those labelled with another slot are left out,
// objects without the label are not. All slots need none.
func childSelector(s slots) string {
	if s == ^slots(0) {
		return ""
	}
	others := make([]string, 0, NumSlots-s.count())
	for i := range (^s).each() {
		others = append(others, strconv.Itoa(i))
	}
	return LabelSlot + " notin (" + strings.Join(others, ",") + ")"
}

// shardRange selects the UIDs that hash into [from, to); to 0 stands for
// 2^64.
func shardRange(from, to uint64) string {
	end := fmt.Sprintf("0x%016x", to)
	if to == 0 {
		end = "0x10000000000000000"
	}
	return fmt.Sprintf("shardRange(object.metadata.uid, '0x%016x', '%s')", from, end)
}

// assign gives each slot to a member: rendezvous hashing, bounded. Every
// pair of a slot and a member has a score; going down the pairs from the
// highest score, a slot goes to the member if it has none yet and the
// member has less than its share (64 divided by the members, the first
// ones by name taking the remainder). Every replica computes the same
// from the same members, the shares differ by one at most, and a member
// joining or leaving moves little more than its share.
func assign(members []string) map[string]slots {
	members = slices.Compact(slices.Sorted(slices.Values(members)))
	out := make(map[string]slots, len(members))
	if len(members) == 0 {
		return out
	}
	type pair struct {
		score  uint64
		slot   int
		member int
	}
	pairs := make([]pair, 0, NumSlots*len(members))
	share := make([]int, len(members))
	for m, name := range members {
		share[m] = NumSlots / len(members)
		if m < NumSlots%len(members) {
			share[m]++
		}
		for i := range NumSlots {
			pairs = append(pairs, pair{score(i, name), i, m})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int { return cmp.Compare(b.score, a.score) })
	var given slots
	for _, p := range pairs {
		if given.has(p.slot) || share[p.member] == 0 {
			continue
		}
		share[p.member]--
		given |= 1 << p.slot
		out[members[p.member]] |= 1 << p.slot
	}
	return out
}

// score ranks member for slot: a hash of both, mixed.
func score(slot int, member string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	x := h.Sum64() ^ (uint64(slot)+1)*0x9e3779b97f4a7c15
	// splitmix64's finalizer, so that nearby slots rank independently.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// shardMetrics are a group's series.
type shardMetrics struct {
	name           string
	members, slots prometheus.Gauge
	handovers      *prometheus.CounterVec
	ranges         string // the slots of the range series
}

// held shows the slots that the replica holds.
func (m *shardMetrics) held(s slots) {
	m.slots.Set(float64(s.count()))
	if text := s.String(); text != m.ranges {
		shardRanges.DeleteLabelValues(m.name, m.ranges)
		shardRanges.WithLabelValues(m.name, text).Set(1)
		m.ranges = text
	}
}

var (
	shardMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_members",
		Help: "Live replicas that this replica sees in its group, itself included.",
	}, []string{"shards"})
	shardSlots = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_slots",
		Help: "Hash slots, of 64, whose objects this replica reconciles.",
	}, []string{"shards"})
	shardRanges = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_range",
		Help: "1 for the slots that this replica holds, such as \"0-20,42\"; the hash range of slot i is [i, i+1) times 2^58.",
	}, []string{"shards", "slots"})
	shardHandovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kfsm_shard_handovers_total",
		Help: "Hash slots that this replica gained or released.",
	}, []string{"shards", "direction"})
	shardFallback = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kfsm_shard_fallback",
		Help: "1 when the API server did not honour the shard selector for a resource, so that this replica caches all of its objects.",
	}, []string{"shards", "resource"})
)

func init() {
	metrics.Registry.MustRegister(shardMembers, shardSlots, shardRanges, shardHandovers, shardFallback)
}

func newShardMetrics(name string) *shardMetrics {
	return &shardMetrics{
		name:      name,
		ranges:    "-",
		members:   shardMembers.WithLabelValues(name),
		slots:     shardSlots.WithLabelValues(name),
		handovers: shardHandovers,
	}
}

// Sharded makes the machine run on every replica of s, each reconciling
// the objects of the hash slots it holds; see [Shards]. The machine's
// controller then needs no leader election, and WithOptions may not ask
// for it.
func (m *Machine[T]) Sharded(s *Shards) *Machine[T] {
	m.shards = s
	return m
}

// shard registers a sharded machine's reconciler with its Shards.
func (r *reconciler[T]) shard(mgr manager.Manager, s *Shards) error {
	mapping, err := mgr.GetRESTMapper().RESTMapping(r.gk, r.gvk.Version)
	if err != nil {
		return err
	}
	resources := []*shardedResource{newShardedResource(r.gvk, mapping.Resource.Resource, false)}
	for _, t := range r.owns {
		m, err := mgr.GetRESTMapper().RESTMapping(t.gvk.GroupKind(), t.gvk.Version)
		if err != nil {
			return err
		}
		resources = append(resources, newShardedResource(t.gvk, m.Resource.Resource, true))
	}
	if err := s.join(mgr, r.m.name, resources, r); err != nil {
		return err
	}
	r.shards = s
	return nil
}

// handedOver makes sure, on the first reconcile of obj since this replica
// took its slot, that the cache is not behind the API server: the replica
// that held the slot may have written the object a moment ago. The
// stale-cache guard then waits until the cache has caught up.
func (r *reconciler[T]) handedOver(ctx context.Context, obj T, epoch uint64) error {
	key := client.ObjectKeyFromObject(obj)
	r.mu.Lock()
	checked := r.handed[key] == epoch
	r.mu.Unlock()
	if checked {
		return nil
	}
	server := newObject[T]()
	if err := r.reader.Get(ctx, key, server); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the cache will tell
		}
		return err
	}
	if rv, ok := echo.ResourceVersion(server); ok {
		r.echoes.AtLeast(echo.Key{GroupKind: r.gk, NamespacedName: key}, rv)
	}
	r.mu.Lock()
	r.handed[key] = epoch
	r.mu.Unlock()
	return nil
}

// gained queues the cached objects in the slots that this replica took.
func (r *reconciler[T]) gained(ctx context.Context, won slots) {
	obj, err := r.client.Scheme().New(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err != nil {
		logf.FromContext(ctx).Error(err, "listing the objects of slots taken", "machine", r.m.name)
		return
	}
	list := obj.(client.ObjectList)
	if err := r.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		if ctx.Err() == nil {
			logf.FromContext(ctx).Error(err, "listing the objects of slots taken", "machine", r.m.name)
		}
		return
	}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if obj := o.(client.Object); won.has(SlotOf(obj.GetUID())) {
			r.requeue(client.ObjectKeyFromObject(obj))
		}
		return nil
	})
}

// released forgets the objects of the slots this replica gives up, and
// cancels their actions.
func (r *reconciler[T]) released(lost slots) []<-chan struct{} {
	var keys []types.NamespacedName
	r.mu.Lock()
	for key, t := range r.tracked {
		if lost.has(SlotOf(t.uid)) {
			keys = append(keys, key)
		}
	}
	r.mu.Unlock()
	for _, key := range keys {
		r.forget(key)
	}
	return r.actions.cancelSlots(lost)
}
