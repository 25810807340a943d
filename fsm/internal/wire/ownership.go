package wire

// The fields of a child that kfsm created with a create request, moved
// from its field manager's update to its apply.
//
// kfsm creates a new child with a create request, which fails if an
// object of the name exists, so that the check for someone else's object
// costs nothing when there is none; and it changes children with
// server-side apply. The API server records the fields of a create under
// the manager's update, which to an apply is another manager: an apply
// that changes one of those fields conflicts with kfsm itself, and one
// that leaves a field out does not remove it, as the update still owns
// it. So the first change of such a child moves the update's fields to the
// apply: with one patch when the process knows that its create was the
// child's last write, and otherwise after the apply, as kubectl does when
// it upgrades an object to server-side apply, and applies again.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// heldByUpdate reports whether manager owns fields of obj by an update,
// as after a create request of its own.
func heldByUpdate(obj client.Object, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationUpdate && f.Subresource == "" {
			return true
		}
	}
	return false
}

// conflictWith reads the manager out of a conflict cause of an apply; a
// manager that wrote with an update carries the version it used.
var conflictWith = regexp.MustCompile(`^conflict with "([^"]*)" using `)

// conflictsOnlyWithUpdate reports whether err, an apply's answer, is a
// conflict with fields that manager owns by an update and with nothing
// else: with its own create's record, which the apply may force.
func conflictsOnlyWithUpdate(err error, manager string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	n := 0
	for _, c := range status.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		if m := conflictWith.FindStringSubmatch(c.Message); m == nil || m[1] != manager {
			return false
		}
		n++
	}
	return n > 0
}

// upgrade moves the fields that manager owns of obj by an update to its
// apply, with a patch that holds only if obj is still the object's latest
// version; obj becomes the object the patch left. It changes nothing, and
// returns false, if manager owns no field by an update.
func upgrade(ctx context.Context, c client.Writer, obj client.Object, manager string) (bool, error) {
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(obj, sets.New(manager), manager)
	if err != nil || patch == nil {
		return false, err
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return false, fmt.Errorf("moving the fields that %s created to its apply: %w", manager, err)
	}
	return true, nil
}

// Apply sends body, a server-side apply by manager, to obj's object and
// leaves the answer in obj. When manager owns fields of the object by an
// update, the apply conflicts with manager itself (then it is sent again
// with force, which takes over only those fields) or leaves behind the
// fields that body no longer sets: Apply then moves the update's fields
// to the apply and applies again. If created is the version that
// manager's create left and the object is still at it, the create's
// record is the only entry of its managed fields, and Apply moves it
// first, without reading it. It calls made with each version that it
// writes before the last. It makes no read, so that a partitioned
// process's fence stops each of its requests.
func Apply(ctx context.Context, c client.Client, obj client.Object, body []byte, manager, created string, made func(client.Object), opts ...client.PatchOption) error {
	if created != "" {
		switch err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, createdToApply(manager, created))); {
		case err == nil:
			made(obj)
		case !refused(err):
			// The move may have been made, at a version that this process
			// cannot know for its own: its event would come back as
			// someone else's change. The apply fails, as a write whose
			// outcome is unknown does, and is tried again.
			return fmt.Errorf("moving the fields that %s created to its apply: %w", manager, err)
		}
	}
	patch := client.RawPatch(types.ApplyPatchType, body)
	err := c.Patch(ctx, obj, patch, opts...)
	if conflictsOnlyWithUpdate(err, manager) {
		err = c.Patch(ctx, obj, patch, append(slices.Clip(opts), client.ForceOwnership)...)
	}
	if err != nil || !heldByUpdate(obj, manager) {
		return err
	}
	made(obj)
	moved, err := upgrade(ctx, c, obj, manager)
	if apierrors.IsConflict(err) {
		// Another writer came in between, such as a Deployment's
		// controller with its status: the apply went through, and the
		// move is tried again at the next apply.
		return nil
	}
	if err != nil || !moved {
		return err
	}
	made(obj)
	return c.Patch(ctx, obj, patch, opts...)
}

// refused reports whether err is the API server's answer that it made
// no change, a status of 4xx (the object moved on, or is gone). A lost
// connection, a timeout, a fence that cut the answer off or a 5xx leave
// the outcome unknown.
func refused(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code/100 == 4
}

// createdToApply is a JSON patch that makes the first entry of managed
// fields, manager's update, its apply, if the object is at version rv.
func createdToApply(manager, rv string) []byte {
	entry := "/metadata/managedFields/0/"
	patch, _ := json.Marshal([]map[string]string{
		{"op": "test", "path": entry + "manager", "value": manager},
		{"op": "test", "path": entry + "operation", "value": string(metav1.ManagedFieldsOperationUpdate)},
		{"op": "replace", "path": entry + "operation", "value": string(metav1.ManagedFieldsOperationApply)},
		// A replace rather than a test, so that another version is a 409
		// from the store, as in csaupgrade.
		{"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
	})
	return patch
}
