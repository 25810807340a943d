package fsmtest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// invoices are the invoices that invoicing sent, by gadget: an effect
// outside the cluster, which no status shows.
var invoices = struct {
	sync.Mutex
	sent map[string]int
}{sent: map[string]int{}}

func invoice(who string) {
	invoices.Lock()
	defer invoices.Unlock()
	invoices.sent[who]++
}

func invoiced(who string) int {
	invoices.Lock()
	defer invoices.Unlock()
	return invoices.sent[who]
}

// countInvoices counts the invoices of the run's gadget.
var countInvoices = fsmtest.Effects(func(e *fsmtest.Env) map[string]int {
	return map[string]int{"invoices": invoiced(e.Namespace + "/g")}
})

// invoicing sends one invoice for a gadget. Broken, it sends it in its
// handler, before the status write that moves the gadget on, so that a
// failed write sends it again; right, it sends it in an action that
// observes the invoices sent.
func invoicing(broken bool) func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return func(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
		return simple("invoicing", func(_ context.Context, r *request) fsm.Result {
			who := r.Object.Namespace + "/" + r.Object.Name
			if broken {
				invoice(who)
				return fsm.Next(Ready)
			}
			a := r.Action("invoice", func(context.Context, *fsm.ActionRun) error {
				invoice(who)
				return nil
			}, fsm.Observe(func(context.Context, *fsm.ActionRun) (bool, error) { return invoiced(who) > 0, nil }))
			switch a.State {
			case fsm.ActionPending:
				return fsm.Wait(0, "Invoicing")
			case fsm.ActionFailed:
				return fsm.Fail(a.Err)
			}
			return fsm.Next(Ready)
		})
	}
}

// dunning sends an invoice on every run of its Ready state: a resync
// with nothing changed sends another.
func dunning(*fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("dunning", fsm.Lifecycle).
		Initial(Working).
		State(Working, func(context.Context, *request) fsm.Result { return fsm.Next(Ready) }, fsm.To(Ready)).
		State(Ready, func(_ context.Context, r *request) fsm.Result {
			invoice(r.Object.Namespace + "/" + r.Object.Name)
			return fsm.Done()
		}, fsm.Final()).
		OnDelete(Cleanup).
		State(Cleanup, nil, fsm.Final())
}

// Invoices sent in an action that observes them are sent once, whatever
// write fails and wherever the process dies.
func TestFaultsCountEffectsOfACorrectMachine(t *testing.T) {
	fsmtest.Faults(t, invoicing(false), createAndDelete, fsmtest.Only(fsmtest.FailWrite, fsmtest.Crash),
		countInvoices, fsmtest.Converge(20*time.Second))
}
