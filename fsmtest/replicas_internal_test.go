package fsmtest

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestOverlapFindsTwoReplicasOnOneObjectAtOnce(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	walk := func(replica string, from, to int) machineWalk {
		w := machineWalk{machine: "m", replica: replica}
		w.Object, w.Began, w.Ended = types.NamespacedName{Name: "g"}, at(from), at(to)
		return w
	}
	for _, tc := range []struct {
		name  string
		walks []machineWalk
		want  string // the two replicas, or "" for none
	}{
		{"one after the other", []machineWalk{walk("r0-p1", 0, 10), walk("r1-p1", 10, 20), walk("r0-p1", 25, 30)}, ""},
		{"one replica's walks", []machineWalk{walk("r0-p1", 0, 100), walk("r0-p1", 5, 6)}, ""},
		{"overlapping", []machineWalk{walk("r0-p1", 0, 10), walk("r1-p1", 5, 15)}, "r0-p1 r1-p1"},
		{"inside a long one", []machineWalk{walk("r1-p1", 30, 40), walk("r0-p1", 0, 100), walk("r0-p1", 5, 6)}, "r0-p1 r1-p1"},
		{"a new process of a replica", []machineWalk{walk("r0-p1", 0, 50), walk("r0-p2", 40, 60)}, "r0-p1 r0-p2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, ok := overlap(tc.walks)
			got := ""
			if ok {
				got = a.replica + " " + b.replica
			}
			if got != tc.want {
				t.Errorf("overlap = %q, want %q", got, tc.want)
			}
		})
	}
}

// Two replicas that do not share their Leases (each in a group of its
// own, as a Deployment renamed halfway through a rollout would be) both
// reconcile every object: the oracle of Replicas says so.
func TestReplicasThatDoNotShareAreCaughtReconcilingAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an API server, which -short does not start")
	}
	// The handler waits, a while at most, for the other replica to enter
	// it too: both reconcile the one gadget at once, whatever order and
	// speed the machine gives their starts.
	var entered atomic.Int32
	both := make(chan struct{})
	slow := func(*Env) *fsm.Machine[*v1alpha1.Gadget] {
		return fsm.New[*v1alpha1.Gadget]("slow", fsm.Lifecycle).
			Initial("Working").
			State("Working", func(context.Context, *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
				n := entered.Add(1)
				if n == 2 {
					close(both)
				}
				select {
				case <-both:
				case <-time.After(10 * time.Second):
				}
				// The second to enter leaves a second after the first:
				// the gadget is Ready, and the test's body over, while
				// the second replica's walk still runs.
				time.Sleep(time.Duration(n) * time.Second)
				return fsm.Next("Ready")
			}, fsm.To("Ready")).
			State("Ready", nil, fsm.Final())
	}
	rec := &runT{TB: t, name: t.Name()}
	rec.do(func() {
		e := New(rec)
		o := faultOptions{replicas: 2, group: func(replica int) string { return fmt.Sprintf("group-%d", replica) }}
		op := newOperator(e, slow, nil, o.runOptions(e)...)
		if err := op.start(); err != nil {
			rec.Fatal(err)
		}
		g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
		e.Create(g)
		e.AwaitState(g, "Ready")
	})
	failures := strings.Join(rec.failures(), "\n")
	if !regexp.MustCompile(`was reconciled by two replicas at once: by r[01]-p1 from \S+ to \S+, and by r[01]-p1 from`).MatchString(failures) {
		t.Errorf("two replicas in groups of their own passed, or failed otherwise:\n%s", failures)
	}
}
