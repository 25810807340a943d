package moose

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/examples/moose/v1alpha1"
)

// A moose's friends fit in its status: a moose with MaxFriends friends
// makes no more, and no other moose befriends it.
func TestAMooseMakesAtMostMaxFriends(t *testing.T) {
	h := NewHerd(1)
	h.FriendChance, h.LookAround = 1, 0
	herd := make([]*v1alpha1.Moose, v1alpha1.MaxFriends+2)
	for i := range herd {
		herd[i] = &v1alpha1.Moose{ObjectMeta: metav1.ObjectMeta{Namespace: "herd", Name: fmt.Sprintf("moose-%03d", i)}}
		h.members[client.ObjectKeyFromObject(herd[i])] = true
	}
	now := time.Now()
	for range len(herd) {
		h.maybeBefriend(herd[0], now)
	}
	for _, m := range herd[1:] {
		h.maybeBefriend(m, now)
	}
	h.show(herd[0])
	if got := len(herd[0].Status.Friends); got != v1alpha1.MaxFriends {
		t.Errorf("the moose has %d friends, want %d", got, v1alpha1.MaxFriends)
	}
}
