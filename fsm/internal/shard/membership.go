package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// look renews this replica's Lease, reads the others' and acts on what
// changed: the heart of the membership.
func (s *Replica) look(ctx context.Context) error {
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
	members, others, freed := s.survey(ctx, list.Items)
	s.others, s.freed = others, freed
	s.askAgain(ctx)
	if won := claims &^ others; won != 0 {
		s.held |= won
		s.take(ctx, won)
	}
	newest := s.newest(members)
	s.previous, s.assigned = s.assigned, assign(newest)[s.o.Identity]
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
	s.m.standingAside.Set(float64(len(members) - len(newest)))
	s.m.held(s.held)
	return nil
}

// member is a live replica and the newest graph version of its machines.
type member struct {
	name         string
	graphVersion int
}

// newest returns the names of the members whose graph version is the
// newest, which the slots go to: during a rolling update that changes a
// graph, a replica of the older graph holds no slot, so that no object
// that a newer replica migrated is handed to one that would leave it
// alone. It says so when this replica stands aside, and when it no
// longer does.
func (s *Replica) newest(members []member) []string {
	top := 0
	for _, m := range members {
		top = max(top, m.graphVersion)
	}
	var names []string
	for _, m := range members {
		if m.graphVersion == top {
			names = append(names, m.name)
		}
	}
	if aside := s.graphVersion < top; aside != s.aside {
		s.aside = aside
		if aside {
			s.log.Info("a replica of a newer graph version is live: this replica gives up its slots to the newest", "graphVersion", s.graphVersion, "newest", top)
		} else {
			s.log.Info("no replica of a newer graph version is live: this replica takes its share of the slots again", "graphVersion", s.graphVersion)
		}
	}
	return names
}

// survey reads the Leases of the group, leases, into what this replica
// has seen of the others, and deletes those that expired. It returns the
// live members, the slots that the others hold and those that expired
// Leases held.
func (s *Replica) survey(ctx context.Context, leases []coordinationv1.Lease) (members []member, others, freed Slots) {
	// A change is seen now, after the list: never before its writer sent
	// it, which its fence counts from.
	now := time.Now()
	s.mu.Lock()
	members = []member{{s.o.Identity, s.graphVersion}}
	s.mu.Unlock()
	for _, l := range leases {
		if l.Name == s.lease {
			continue
		}
		was, known := s.seen[l.Name]
		if !known || was.version != l.ResourceVersion {
			was = seen{version: l.ResourceVersion, changed: now}
		}
		was.gone = false
		was.holder = ptr.Deref(l.Spec.HolderIdentity, "")
		was.slots, _ = parse(l.Annotations[AnnotationSlots])
		// A Lease that names no version is an older kfsm's, whose
		// machines have the first.
		v, err := strconv.Atoi(l.Annotations[annotationGraphVersion])
		if err != nil {
			v = 1
		}
		was.graphVersion = v
		was.duration = s.o.LeaseDuration
		if d := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); d > 0 {
			was.duration = max(was.duration, time.Duration(d)*time.Second)
		}
		s.seen[l.Name] = was
	}
	for name, l := range s.seen {
		if !slices.ContainsFunc(leases, func(x coordinationv1.Lease) bool { return x.Name == name }) {
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
				members = append(members, member{l.holder, l.graphVersion})
			}
		}
	}
	return members, others, freed
}

// renew writes this replica's Lease listing held.
func (s *Replica) renew(ctx context.Context, held Slots) error {
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
func (s *Replica) annotations(held Slots) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return map[string]string{AnnotationSlots: held.String(), AnnotationMachines: strings.Join(s.names, ","), annotationInstance: s.instance,
		annotationGraphVersion: strconv.Itoa(s.graphVersion)}
}

// lost gives up every slot at once, after the Lease was taken away.
func (s *Replica) lost() {
	s.stop(s.held | s.assigned)
	s.held, s.assigned, s.previous, s.version = 0, 0, 0, ""
	s.setSelector(0)
}

// leave gives every slot up, waits briefly for their work to end, and
// deletes the Lease, so that the others take the slots at once.
func (s *Replica) leave() {
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
func (s *Replica) take(ctx context.Context, won Slots) {
	s.mu.Lock()
	s.active |= won
	for i := range won.Each() {
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
			m.Gained(ctx, won)
		}
	}()
}

// awaitCache waits until the cache holds the objects of the selection of
// generation gen, and reports false if ctx ended first.
func (s *Replica) awaitCache(ctx context.Context, gen uint64) bool {
	held := func(context.Context) (bool, error) { return s.cached(gen), nil }
	return wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, held) == nil
}

// stop lets no new reconcile of the slots start, and cancels their
// actions.
func (s *Replica) stop(lost Slots) {
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
		// Each slot waits for its own objects' actions only: one that is
		// slow to return holds back no other slot.
		for i, done := range m.Released(lost) {
			s.waiting[i] = append(s.waiting[i], done...)
		}
	}
}

// drainedOf returns the slots of some whose reconciles and actions have
// ended.
func (s *Replica) drainedOf(some Slots) Slots {
	var done Slots
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range some.Each() {
		if s.active.Has(i) || s.inflight[i] > 0 {
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
