package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// handFull is the hand-written controller made to keep the same data as
// kfsm: the labels kfsm puts on each child, and a status of the same
// shape (a condition per state, the state and its time, the history, and
// the outputs with their digests and versions). It is not a rival of
// kfsm; it is the yardstick that tells what of kfsm's memory is the data
// it keeps on every object and what is the framework's own bookkeeping.
type handFull struct {
	client client.Client
}

const handFullOwner = "hand-full"

func setupHandFull(mgr ctrl.Manager, workers int) error {
	return setupHandWritten(mgr, "hand-full", workers, true, &handFull{client: mgr.GetClient()})
}

func (h *handFull) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var g v1alpha1.Gadget
	if err := h.client.Get(ctx, req.NamespacedName, &g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cm, svc := children(&g, map[string]string{
		fsm.LabelManagedBy: "kfsm",
		fsm.LabelMachine:   "gadget",
		fsm.LabelOwnerUID:  string(g.UID),
	})
	cmDigest, err := applyDigest(cm)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := h.client.Apply(ctx, cm, client.FieldOwner(handFullOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the ConfigMap: %w", err)
	}
	svcDigest, err := applyDigest(svc)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := h.client.Apply(ctx, svc, client.FieldOwner(handFullOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the Service: %w", err)
	}

	before := g.Status.DeepCopy()
	s := &g.Status.Status
	now := metav1.Now()
	s.ObservedGeneration = g.Generation
	for _, c := range []struct{ typ, reason, message string }{
		{fsm.ConditionReady, "Done", "state Done is done"},
		{string(Configured), "Passed", ""},
		{string(Exposed), "Passed", ""},
		{string(Done), "Done", "state Done is done"},
	} {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: c.typ, Status: metav1.ConditionTrue, Reason: c.reason, Message: c.message,
			ObservedGeneration: g.Generation,
		})
	}
	if s.State != Done {
		s.State, s.StateSince = Done, &now
		s.History = []fsm.Transition{{To: Done, Reason: "Done", Time: now}}
	}
	s.Outputs = []fsm.OutputRef{
		{Kind: "ConfigMap", Namespace: g.Namespace, Name: g.Name, UID: *cm.UID, AppliedDigest: cmDigest, ResourceVersion: *cm.ResourceVersion},
		{Kind: "Service", Namespace: g.Namespace, Name: g.Name, UID: *svc.UID, AppliedDigest: svcDigest, ResourceVersion: *svc.ResourceVersion},
	}
	if equality.Semantic.DeepEqual(before, &g.Status) {
		return ctrl.Result{}, nil
	}
	// Filtered as hand is, its own status update brings no event: a
	// conflict is requeued.
	if err := h.client.Status().Update(ctx, &g); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating the status: %w", err)
	}
	return ctrl.Result{}, nil
}

// applyDigest is the first half of the SHA-256 of what an apply sends, in
// hexadecimal, as kfsm records it.
func applyDigest(ac any) (string, error) {
	body, err := json.Marshal(ac)
	if err != nil {
		return "", fmt.Errorf("encoding an apply: %w", err)
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:16]), nil
}
