package shard

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NumSlots is sharding.NumSlots: the number of hash slots. An object's slot is
// the top six bits of the 64-bit FNV-1a hash of its UID, the hash that the
// API server's shardRange uses, so that a set of slots is a set of hash
// ranges.
const NumSlots = 64

// Slots is a set of hash slots.
type Slots uint64

// Has reports whether slot i is in the set.
func (s Slots) Has(i int) bool { return s&(1<<i) != 0 }

func (s Slots) count() int { return bits.OnesCount64(uint64(s)) }

// Each yields the slots in s, lowest first.
func (s Slots) Each() func(func(int) bool) {
	return func(yield func(int) bool) {
		for rest := uint64(s); rest != 0; rest &= rest - 1 {
			if !yield(bits.TrailingZeros64(rest)) {
				return
			}
		}
	}
}

// span is the set of the slots from first to last.
func span(first, last int) Slots { return (Slots(1)<<(last-first+1) - 1) << first }

// runs returns the runs of consecutive slots, as [first, last] pairs: a
// run ends where the ones from its lowest slot up do.
func (s Slots) runs() [][2]int {
	var out [][2]int
	for rest := s; rest != 0; {
		first := bits.TrailingZeros64(uint64(rest))
		last := first + bits.TrailingZeros64(^uint64(rest>>first)) - 1
		out = append(out, [2]int{first, last})
		rest &^= span(first, last)
	}
	return out
}

// String writes the slots as "0-20,42"; no slots is "".
func (s Slots) String() string {
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
func parse(text string) (Slots, error) {
	var s Slots
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
		s |= span(a, b)
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

// Holders is sharding.Holders.
func Holders(leases []coordinationv1.Lease, machine string) (holder func(types.UID) string, ok bool) {
	var holders [NumSlots]string
	for _, l := range leases {
		if l.Labels[LabelShards] == "" || !slices.Contains(strings.Split(l.Annotations[AnnotationMachines], ","), machine) {
			continue
		}
		ok = true
		held, err := parse(l.Annotations[AnnotationSlots])
		if err != nil {
			continue
		}
		for i := range held.Each() {
			holders[i] = ptr.Deref(l.Spec.HolderIdentity, "")
		}
	}
	return func(uid types.UID) string { return holders[SlotOf(uid)] }, ok
}

// assign gives each slot to a member: rendezvous hashing, bounded. Every
// pair of a slot and a member has a score; going down the pairs from the
// highest score, a slot goes to the member if it has none yet and the
// member has less than its share (64 divided by the members, the first
// ones by name taking the remainder). Every replica computes the same
// from the same members, the shares differ by one at most, and a member
// joining or leaving moves little more than its share.
func assign(members []string) map[string]Slots {
	members = slices.Compact(slices.Sorted(slices.Values(members)))
	out := make(map[string]Slots, len(members))
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
	var given Slots
	for _, p := range pairs {
		if given.Has(p.slot) || share[p.member] == 0 {
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

// selectorOf returns the shard selector of a set of slots. The API server
// takes no empty selector, so no slots select the one hash 0.
func selectorOf(s Slots) string {
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

// Listing has a list ask the API server for the objects of the slots
// alone, by its shard selector; a server that ignores it sends them all.
func (s Slots) Listing() client.ListOption {
	return &client.ListOptions{Raw: &metav1.ListOptions{ShardSelector: selectorOf(s)}}
}

// childSelector returns the label selector of the children of the
// objects in the slots: those labelled with another slot are left out,
// objects without the label are not. All slots need none.
func childSelector(s Slots) string {
	if s == ^Slots(0) {
		return ""
	}
	others := make([]string, 0, NumSlots-s.count())
	for i := range (^s).Each() {
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
