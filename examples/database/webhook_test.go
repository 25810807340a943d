package database_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/examples/database"
	"github.com/kfsm/kfsm/examples/database/agent"
	"github.com/kfsm/kfsm/fsmtest"
)

// TestAdmissionRefusesWhatTheMachineCannotDo runs the operator with its
// admission webhooks, which the API server calls over TLS, and changes
// databases with kubectl, as a user does.
func TestAdmissionRefusesWhatTheMachineCannotDo(t *testing.T) {
	e := fsmtest.New(t)
	a := startAgent(t)
	op := fsmtest.Run(e, (&database.Operator{Agent: &agent.Client{URL: a.URL()}}).Machine(), fsmtest.WithWebhooks())
	apply := func(desired string) (string, error) {
		manifest := filepath.Join(t.TempDir(), "orders.yaml")
		doc := "apiVersion: examples.kfsm.dev/v1alpha1\nkind: Database\nmetadata:\n  name: orders\nspec:\n  desiredState: " + desired + "\n"
		if err := os.WriteFile(manifest, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return e.Kubectl("apply", "-f", manifest)
	}
	refused := func(what, out string, err error, says ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s was allowed: %s", what, out)
		}
		t.Logf("%s: %s", what, out)
		for _, s := range says {
			if !strings.Contains(out, s) {
				t.Errorf("%s was refused without saying %q:\n%s", what, s, out)
			}
		}
	}

	// A valid change is allowed: Running, then Stopped.
	if out, err := apply("Running"); err != nil {
		t.Fatal(out)
	}
	d := named("orders", "Running")
	at(e, a, d, database.Running, agent.Running)
	if out, err := apply("Stopped"); err != nil {
		t.Fatalf("stopping a running database was refused: %v", err)
	} else if !strings.Contains(out, "configured") {
		t.Errorf("kubectl apply said %q, want configured", out)
	}
	at(e, a, d, database.End, agent.Stopped)

	// Running again is no longer reachable: refused at apply, in the words
	// of the GoalUnreachable condition, and the spec is unchanged.
	out, err := apply("Running")
	refused("asking a stopped database to run", out, err, "admission webhook", "denied the request",
		"no path leads from state End to goal Running")
	if e.Get(d); d.Spec.DesiredState != "Stopped" {
		t.Errorf("spec.desiredState = %q after the refused apply, want Stopped", d.Spec.DesiredState)
	}

	// Only the operator writes the machine's fields of the status.
	out, err = e.Kubectl("patch", "database", "orders", "--subresource=status", "--type=merge", "-p", `{"status":{"state":"Running"}}`)
	refused("a hand edit of status.state", out, err, "status.state of a Database is written by the operator of machine database only",
		fsmtest.OperatorUser)
	if e.Get(d); d.Status.State != database.End {
		t.Errorf("status.state = %s after the refused edit, want End", d.Status.State)
	}

	// With the operator down, its webhook is down, and the failure policy
	// (Fail) refuses the change rather than let it through unchecked.
	op.Stop()
	out, err = apply("Servicing")
	refused("a change while the webhook is down", out, err, `failed calling webhook "validate.database.databases.examples.kfsm.dev"`)
}
