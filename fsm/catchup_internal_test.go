package fsm

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// TestAReconcileBeforeTheCatchUpWaitsForIt starts a reconcile while a new
// leader's catch-up is still listing the objects: it must wait for the
// catch-up and then do its work, once. Requeued instead, every object of
// the cache's first list came back for a second reconcile as soon as the
// workers outran the list (at 10,000 objects, all of them did).
func TestAReconcileBeforeTheCatchUpWaitsForIt(t *testing.T) {
	c, r := readyReconciler(t)
	r.caughtUp = make(chan struct{}) // a leader's catch-up under way
	ctx := logr.NewContext(t.Context(), logr.Discard())

	type answer struct {
		after time.Duration
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := r.Reconcile(ctx, benchRequest)
		done <- answer{res.RequeueAfter, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("the reconcile returned before the catch-up ended (requeue after %s, error %v), to come back for the same object", a.after, a.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(r.caughtUp)
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	var o benchObject
	if err := c.Client.Get(ctx, benchRequest.NamespacedName, &o); err != nil {
		t.Fatal(err)
	}
	if o.Status.State != "Ready" {
		t.Fatalf("after the catch-up, the reconcile left the object in state %q, want Ready", o.Status.State)
	}

	// A manager that stops meanwhile ends the wait.
	r.caughtUp = make(chan struct{})
	stopped, stop := context.WithCancel(ctx)
	stop()
	go func() {
		res, err := r.Reconcile(stopped, benchRequest)
		done <- answer{res.RequeueAfter, err}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a reconcile waiting for the catch-up did not end with its context")
	}
}
