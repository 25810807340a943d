package fsmtest

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// polling is a driver whose operator has no process of its own: its
// await polls cond until it holds.
type polling struct{}

func (polling) await(_ string, cond func() (bool, string)) {
	for ok, _ := cond(); !ok; ok, _ = cond() {
		time.Sleep(10 * time.Millisecond)
	}
}

// A faulty run's snapshot at an Await is of a moment when what it awaits
// held. An operator that polls on its own clock can write between the
// last read of the condition and the snapshot: here it writes a
// transient status right after that read, and heals it a moment later.
// The snapshot must not be of the transient status.
func TestASnapshotIsOfAMomentWhenTheAwaitHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an API server, which -short does not start")
	}
	t.Parallel()
	e := New(t)
	e.snap, e.driver = &snapshots{holdUntil: -1}, polling{}
	e.kindsMu.Lock()
	e.parents = append(e.parents, v1alpha1.GroupVersion.WithKind("Gadget"))
	e.kindsMu.Unlock()
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.Namespace}}
	if err := e.Client.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	// note writes g's status as the operator would: one write of its own.
	key := client.ObjectKeyFromObject(g)
	note := func(text string) {
		e.api.begin()
		defer e.api.done(&Write{Verb: "update", apiKey: apiKey{Resource: "gadgets", Namespace: key.Namespace, Name: key.Name}, Subresource: "status"})
		var cur v1alpha1.Gadget
		if err := e.Client.Get(context.Background(), key, &cur); err != nil {
			t.Error(err)
			return
		}
		cur.Status.Note = text
		if err := e.Client.Status().Update(context.Background(), &cur); err != nil {
			t.Error(err)
		}
	}
	var healing sync.WaitGroup
	t.Cleanup(healing.Wait)
	healthy := 0
	e.await("a healthy gadget", func() (bool, string) {
		if err := e.Client.Get(t.Context(), key, g); err != nil {
			t.Fatal(err)
		}
		if g.Status.Note != "" {
			return false, "transient"
		}
		// Await's driver reads once, then the last read before the
		// snapshot: right after that one, the operator writes.
		if healthy++; healthy == 2 {
			note("transient")
			healing.Go(func() {
				time.Sleep(100 * time.Millisecond)
				note("")
			})
		}
		return true, ""
	})
	got := e.snap.taken[0].objects["Gadget/g"].(map[string]any)["status"]
	if note := got.(map[string]any)["note"]; note != nil {
		t.Errorf("the snapshot holds status.note %q, which the gadget had when the condition did not hold", note)
	}
}
