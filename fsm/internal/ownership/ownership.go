// Package ownership moves the fields of a child that kfsm created with a
// create request from its field manager's update to its apply.
//
// kfsm creates a new child with a create request, which fails if an
// object of the name exists, so that the check for someone else's object
// costs nothing when there is none; and it changes children with
// server-side apply. The API server records the fields of a create under
// the manager's update, which to an apply is another manager: an apply
// that changes one of those fields conflicts with kfsm itself, and one
// that leaves a field out does not remove it, as the update still owns
// it. So the first apply to such a child moves the update's fields to the
// apply, as kubectl does when it upgrades an object to server-side apply,
// and applies again.
package ownership

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HeldByUpdate reports whether manager owns fields of obj by an update,
// as after a create request of its own.
func HeldByUpdate(obj client.Object, manager string) bool {
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

// ConflictsWithUpdate reports whether err, an apply's answer, is a
// conflict with fields that manager owns by an update.
func ConflictsWithUpdate(err error, manager string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if m := conflictWith.FindStringSubmatch(c.Message); c.Type == metav1.CauseTypeFieldManagerConflict && m != nil && m[1] == manager {
			return true
		}
	}
	return false
}

// Upgrade moves the fields that manager owns of obj by an update to its
// apply, with a patch that holds only if obj is still the object's latest
// version; obj becomes the object the patch left. It changes nothing, and
// returns false, if manager owns no field by an update.
func Upgrade(ctx context.Context, c client.Writer, obj client.Object, manager string) (bool, error) {
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
// update, the apply conflicts with manager itself or leaves behind the
// fields that body no longer sets: Apply then moves the update's fields
// to the apply and applies again. It calls made with each version that
// it writes before the last; reader reads what a conflict hides.
func Apply(ctx context.Context, c client.Client, reader client.Reader, obj client.Object, body []byte, manager string, made func(client.Object), opts ...client.PatchOption) error {
	err := c.Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, body), opts...)
	switch {
	case err == nil && !HeldByUpdate(obj, manager):
		return nil
	case err == nil:
		made(obj)
	case ConflictsWithUpdate(err, manager):
		if err := reader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
	default:
		return err
	}
	moved, upgradeErr := Upgrade(ctx, c, obj, manager)
	if upgradeErr != nil || !moved {
		return cmp.Or(upgradeErr, err)
	}
	made(obj)
	return c.Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, body), opts...)
}
