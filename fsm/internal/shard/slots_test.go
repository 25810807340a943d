package shard

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The rule gives every slot to exactly one member, each member its share
// rounded up or down, and a member joining takes about its share from
// the others and moves little else.
func TestAssignIsBalancedAndMovesLittle(t *testing.T) {
	var members []string
	before := map[string]Slots{}
	for n := 1; n <= 8; n++ {
		members = append(members, fmt.Sprintf("replica-%d", n))
		got := assign(members)
		var all Slots
		for _, m := range members {
			s := got[m]
			if all&s != 0 {
				t.Fatalf("%d members: %s's slots %s overlap another's", n, m, s)
			}
			all |= s
			if c := s.count(); c < NumSlots/n || c > (NumSlots+n-1)/n {
				t.Errorf("%d members: %s has %d slots, want %d or %d", n, m, c, NumSlots/n, (NumSlots+n-1)/n)
			}
		}
		if all != ^Slots(0) {
			t.Errorf("%d members: slots %s have no member", n, (^all).String())
		}
		moved := 0
		for _, m := range members[:n-1] {
			moved += (before[m] &^ got[m]).count()
		}
		// The newcomer's share must move; allow as much again for the
		// bound that keeps the shares even.
		if share := got[members[n-1]].count(); moved > 2*share {
			t.Errorf("%d members: %d slots moved for a newcomer's share of %d", n, moved, share)
		}
		t.Logf("%d members: %d slots moved", n, moved)
		before = got
	}
}

// While a replica of a newer graph version is live, the slots go to the
// newest replicas alone. A replica says once that it stands aside, and
// once that it no longer does.
func TestTheSlotsGoToTheNewestGraphVersion(t *testing.T) {
	var logged []string
	old := &Replica{graphVersion: 1, log: funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})}
	cases := []struct {
		members []member
		want    []string
	}{
		{[]member{{"old", 1}, {"other-old", 1}}, []string{"old", "other-old"}},
		{[]member{{"old", 1}, {"new", 2}, {"other-new", 2}, {"other-old", 1}}, []string{"new", "other-new"}},
		{[]member{{"old", 1}, {"new", 2}}, []string{"new"}},
		{[]member{{"old", 1}}, []string{"old"}},
	}
	for _, tc := range cases {
		if got := old.newest(tc.members); !slices.Equal(got, tc.want) {
			t.Errorf("newest of %v = %v, want %v", tc.members, got, tc.want)
		}
		assigned := assign(old.newest(tc.members))
		if mine := assigned["old"]; slices.Contains(tc.want, "old") != (mine != 0) {
			t.Errorf("with %v, the old replica is assigned %s", tc.members, mine)
		}
	}
	if len(logged) != 2 || !strings.Contains(logged[0], "gives up its slots") || !strings.Contains(logged[1], "takes its share") {
		t.Errorf("the replica logged %q, want that it stands aside, then that it no longer does", logged)
	}
}

func TestSlotsReadAsTheyAreWritten(t *testing.T) {
	for _, s := range []Slots{0, 1, 1 << 63, ^Slots(0), 0b1011_0111, 1<<5 | 1<<6 | 1<<40} {
		text := s.String()
		back, err := parse(text)
		if err != nil || back != s {
			t.Errorf("parseSlots(%q) = %v, %v; want %v", text, back, err, uint64(s))
		}
	}
	if got := Slots(0b1011_0111).String(); got != "0-2,4-5,7" {
		t.Errorf("String() = %q, want 0-2,4-5,7", got)
	}
	for _, bad := range []string{"x", "3-1", "64", "-1", "1,,2"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parseSlots(%q) took it", bad)
		}
	}
}

func TestSelectorsNameTheSlotsHashRanges(t *testing.T) {
	for s, want := range map[Slots]string{
		0:         "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')",
		1:         "shardRange(object.metadata.uid, '0x0000000000000000', '0x0400000000000000')",
		^Slots(0): "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')",
		1<<2 | 1<<63: "shardRange(object.metadata.uid, '0x0800000000000000', '0x0c00000000000000') || " +
			"shardRange(object.metadata.uid, '0xfc00000000000000', '0x10000000000000000')",
	} {
		if got := selectorOf(s); got != want {
			t.Errorf("selectorOf(%s) = %s, want %s", s, got, want)
		}
		var opts client.ListOptions
		s.Listing().ApplyToList(&opts)
		if got := opts.AsListOptions().ShardSelector; got != want {
			t.Errorf("the list options of %s select %q, want %q", s, got, want)
		}
	}
}
