// Package moose is the Krator moose demo written with kfsm: each Moose
// roams, eats and sleeps on a timetable set by its weight, and makes
// friends among the herd while it roams.
//
// The timetable lives in the graph and the handlers; the herd, which every
// moose shares, lives in the Herd that holds the handlers. Nothing that
// matters lives only in memory: friendships are kept in each moose's
// status, and a new Herd rebuilds itself from them.
package moose

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
)

// The states of a moose.
const (
	Tagged   fsm.State = "Tagged"
	Roaming  fsm.State = "Roaming"
	Eating   fsm.State = "Eating"
	Sleeping fsm.State = "Sleeping"
	Released fsm.State = "Released"
)

// RoamFor is how long a moose roams before it is hungry: heavier moose get
// hungry sooner, from 2 minutes at 50 kg to 6 seconds at 1000 kg.
func RoamFor(weightKg int32) time.Duration {
	return 6000 * time.Second / time.Duration(max(weightKg, 1))
}

// Herd is the state that all moose share: who is in the herd and who
// is friends with whom. Its methods are the handlers of the moose
// machine; they are safe to run for several moose at once.
type Herd struct {
	// EatFor and SleepFor are how long a moose eats and sleeps.
	EatFor, SleepFor time.Duration
	// FriendChance is the chance, each time a roaming moose looks around,
	// that it makes a new friend.
	FriendChance float64
	// LookAround is how often a roaming moose looks around, however often
	// it is reconciled.
	LookAround time.Duration

	mu      sync.Mutex
	rand    *rand.Rand
	loaded  bool
	members map[client.ObjectKey]bool
	looked  map[client.ObjectKey]time.Time       // last look around; losing it costs nothing
	friends map[client.ObjectKey]map[string]bool // by moose, names in its namespace
}

// NewHerd returns an empty herd whose chance draws come from seed.
func NewHerd(seed uint64) *Herd {
	return &Herd{
		EatFor: 5 * time.Second, SleepFor: 8 * time.Second,
		FriendChance: 0.1, LookAround: 3 * time.Second,
		rand:    rand.New(rand.NewPCG(seed, seed)),
		members: map[client.ObjectKey]bool{},
		looked:  map[client.ObjectKey]time.Time{},
		friends: map[client.ObjectKey]map[string]bool{},
	}
}

// Machine returns the moose machine, with the herd's handlers.
func (h *Herd) Machine() *fsm.Machine[*v1alpha1.Moose] {
	return fsm.New[*v1alpha1.Moose]("moose", fsm.Lifecycle).
		Initial(Tagged).
		State(Tagged, h.tag, fsm.To(Roaming)).
		State(Roaming, h.roam, fsm.To(Eating)).
		State(Eating, h.eat, fsm.To(Sleeping)).
		State(Sleeping, h.sleep, fsm.To(Roaming)).
		OnDelete(Released).
		State(Released, h.release, fsm.Final()).
		// A moose that changes reconciles its friends, old and new, so
		// that friendships show on both sides.
		Watches(&v1alpha1.Moose{}, h.friendsOf)
}

type request = fsm.Request[*v1alpha1.Moose]

func (h *Herd) tag(ctx context.Context, r *request) fsm.Result {
	if err := h.join(ctx, r); err != nil {
		return fsm.Fail(err)
	}
	return fsm.Next(Roaming)
}

func (h *Herd) roam(ctx context.Context, r *request) fsm.Result {
	if err := h.join(ctx, r); err != nil {
		return fsm.Fail(err)
	}
	left := RoamFor(r.Object.Spec.Weight) - r.Clock.Since(r.Since)
	if left <= 0 {
		return fsm.Next(Eating)
	}
	h.maybeBefriend(r.Object, r.Clock.Now())
	h.show(r.Object)
	return fsm.Wait(min(left, h.LookAround), "Roaming")
}

func (h *Herd) eat(ctx context.Context, r *request) fsm.Result {
	if err := h.join(ctx, r); err != nil {
		return fsm.Fail(err)
	}
	if left := h.EatFor - r.Clock.Since(r.Since); left > 0 {
		return fsm.Wait(left, "Eating")
	}
	r.Object.Status.Meals++
	return fsm.Next(Sleeping)
}

func (h *Herd) sleep(ctx context.Context, r *request) fsm.Result {
	if err := h.join(ctx, r); err != nil {
		return fsm.Fail(err)
	}
	if left := h.SleepFor - r.Clock.Since(r.Since); left > 0 {
		return fsm.Wait(left, "Sleeping")
	}
	return fsm.Next(Roaming)
}

// release takes the moose out of the herd; its friends forget it when the
// watch reconciles them.
func (h *Herd) release(ctx context.Context, r *request) fsm.Result {
	if err := h.load(ctx, r.Client); err != nil {
		return fsm.Fail(err)
	}
	key := client.ObjectKeyFromObject(r.Object)
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.members, key)
	delete(h.looked, key)
	for name := range h.friends[key] {
		delete(h.friends[client.ObjectKey{Namespace: key.Namespace, Name: name}], key.Name)
	}
	delete(h.friends, key)
	return fsm.Done()
}

// join makes sure the herd knows the moose, and shows its friends.
func (h *Herd) join(ctx context.Context, r *request) error {
	if err := h.load(ctx, r.Client); err != nil {
		return err
	}
	h.mu.Lock()
	h.members[client.ObjectKeyFromObject(r.Object)] = true
	h.mu.Unlock()
	h.show(r.Object)
	return nil
}

// load rebuilds the herd from the cluster the first time it is needed, so
// that a restarted operator knows every friendship.
func (h *Herd) load(ctx context.Context, c client.Client) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.loaded {
		return nil
	}
	var all v1alpha1.MooseList
	if err := c.List(ctx, &all); err != nil {
		return err
	}
	for _, m := range all.Items {
		if m.DeletionTimestamp.IsZero() {
			h.members[client.ObjectKeyFromObject(&m)] = true
		}
	}
	// A friend that is gone stays out, even if a moose's status still
	// names it: the operator may have stopped between the friend's
	// release and the status that forgets it.
	for _, m := range all.Items {
		key := client.ObjectKeyFromObject(&m)
		if !h.members[key] {
			continue
		}
		for _, f := range m.Status.Friends {
			if friend := (client.ObjectKey{Namespace: key.Namespace, Name: f}); h.members[friend] && h.canBefriend(key, friend) {
				h.befriend(key, friend)
			}
		}
	}
	h.loaded = true
	return nil
}

// maybeBefriend lets a roaming moose that has not looked around for a
// while make a friend, by chance, among the members of its namespace that
// are not its friends yet. Neither moose may have its fill of friends.
func (h *Herd) maybeBefriend(m *v1alpha1.Moose, now time.Time) {
	key := client.ObjectKeyFromObject(m)
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Sub(h.looked[key]) < h.LookAround {
		return
	}
	h.looked[key] = now
	if h.rand.Float64() >= h.FriendChance {
		return
	}
	var strangers []client.ObjectKey
	for other := range h.members {
		if other.Namespace == key.Namespace && other != key && h.canBefriend(key, other) {
			strangers = append(strangers, other)
		}
	}
	if len(strangers) == 0 {
		return
	}
	slices.SortFunc(strangers, func(a, b client.ObjectKey) int { return strings.Compare(a.Name, b.Name) })
	h.befriend(key, strangers[h.rand.IntN(len(strangers))])
}

// canBefriend reports whether a and b are not friends yet and both have
// room for a friend in their status.
func (h *Herd) canBefriend(a, b client.ObjectKey) bool {
	return !h.friends[a][b.Name] && len(h.friends[a]) < v1alpha1.MaxFriends && len(h.friends[b]) < v1alpha1.MaxFriends
}

func (h *Herd) befriend(a, b client.ObjectKey) {
	for _, pair := range [][2]client.ObjectKey{{a, b}, {b, a}} {
		if h.friends[pair[0]] == nil {
			h.friends[pair[0]] = map[string]bool{}
		}
		h.friends[pair[0]][pair[1].Name] = true
	}
}

// show writes the moose's friends into its status.
func (h *Herd) show(m *v1alpha1.Moose) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for name := range h.friends[client.ObjectKeyFromObject(m)] {
		names = append(names, name)
	}
	slices.Sort(names)
	m.Status.Friends = names
}

// friendsOf maps a moose to its friends, as its status lists them and as
// the herd knows them, so that both sides of a friendship are updated.
func (h *Herd) friendsOf(_ context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*v1alpha1.Moose)
	if !ok {
		return nil
	}
	names := slices.Clone(m.Status.Friends)
	h.mu.Lock()
	for name := range h.friends[client.ObjectKeyFromObject(m)] {
		names = append(names, name)
	}
	h.mu.Unlock()
	slices.Sort(names)
	var reqs []reconcile.Request
	for _, name := range slices.Compact(names) {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: m.Namespace, Name: name}})
	}
	return reqs
}
