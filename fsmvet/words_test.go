package fsmvet_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmvet"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// kfsm vet and kfsm's refusal at run time give the same reason in the
// same words: the machine of testdata/src/words, run here with package
// fsm, is refused with the message that vet reports before it runs.
func TestVetSaysWhatKfsmSays(t *testing.T) {
	var vetSays []string
	for _, r := range analysistest.Run(t, analysistest.TestData(), fsmvet.Analyzer, "words") {
		for _, d := range r.Diagnostics {
			vetSays = append(vetSays, d.Message)
		}
	}

	start := func(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
		switch r.Object.Spec.Mode {
		case "undeclared":
			return fsm.Next("Nowhere")
		case "typo":
			return fsm.Next("Midle")
		case "events":
			return fsm.Next("Middle", "Nowhere")
		case "events-declared":
			return fsm.Next("Middle", "Elsewhere")
		case "declared":
			return fsm.Next("Elsewhere")
		}
		return fsm.Next("Middle")
	}
	m := fsm.New[*v1alpha1.Gadget]("refusals", fsm.Lifecycle).
		Initial("Start").
		State("Start", start, fsm.To("Middle")).
		State("Middle", func(context.Context, *fsm.Request[*v1alpha1.Gadget]) fsm.Result { return fsm.Next("Elsewhere") }, fsm.To("Elsewhere")).
		State("Elsewhere", nil, fsm.Final())
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	modes := []string{"undeclared", "typo", "events", "events-declared", "declared"}
	if len(vetSays) != len(modes) {
		t.Fatalf("vet reports %d refusals in testdata/src/words, want %d:\n%s", len(vetSays), len(modes), strings.Join(vetSays, "\n"))
	}
	var objs []client.Object
	for _, mode := range modes {
		objs = append(objs, &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: mode, Namespace: "ns"}, Spec: v1alpha1.GadgetSpec{Mode: mode}})
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Gadget{}).Build()
	r, err := m.Reconciler(c, events.NewFakeRecorder(100))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		key := types.NamespacedName{Namespace: "ns", Name: mode}
		if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: key}); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		var g v1alpha1.Gadget
		if err := c.Get(t.Context(), key, &g); err != nil {
			t.Fatal(err)
		}
		var runTime string
		for _, cond := range g.Status.Conditions {
			if cond.Type == fsm.ConditionStalled {
				runTime = cond.Message
			}
		}
		// The run time tells the past; vet, the present.
		want, ok := strings.CutSuffix(runTime, "; the transition was refused")
		if !ok {
			t.Fatalf("%s: the Stalled message %q is not a refusal", mode, runTime)
		}
		want = strings.NewReplacer(" asked to ", " asks to ", " raised events ", " raises events ").Replace(want)
		found := false
		for _, msg := range vetSays {
			found = found || strings.HasPrefix(msg, want)
		}
		if !found {
			t.Errorf("%s: kfsm says %q at run time, and vet says none of that:\n%s", mode, runTime, strings.Join(vetSays, "\n"))
		}
	}
}
