// Package storage moves the stored objects of a custom resource to the
// storage version of its CustomResourceDefinition, so that an older
// version of the type can be dropped.
//
// When an API type moves from one version to the next (v1alpha1 to
// v1beta1, say), the CRD serves both and stores new writes in the one
// marked storage; etcd keeps every other object in the version it was
// last written in, and the CRD's status.storedVersions lists both. The
// API server refuses to remove a version that storedVersions lists, and
// an object stored in a version the CRD no longer has cannot be read.
// [Migrate] writes each object back unchanged, which the API server
// stores in the storage version (an object already in it costs no
// write), then trims storedVersions to the storage version, as Cluster
// API's CRD migrator and the Kubernetes storage version migrator do.
//
// The same path serves a release of kfsm that changes fsm.Status in a
// way that needs a conversion (docs/versioning.md): the project adds an
// API version with the new status, converts between them, makes it the
// storage version, and migrates.
//
// A migration writes once for each object stored in an older version, as
// fast as its client lets it: client-go's default rate limit, 5 requests
// a second, would take half an hour for 10,000 objects.
//
// A migration needs the rights to get the CRD and to update its status
// (customresourcedefinitions/status), and to list and update the
// resource. An operator that kfsm init wrote has neither of the first
// two: run the migration as a step of the release (a Job, or a program
// with an administrator's credentials), after the new CRD is applied and
// before the version is removed.
package storage

import (
	"context"
	"fmt"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Result is what a migration did.
type Result struct {
	// StorageVersion is the CRD's storage version, which every object is
	// stored in once the migration has succeeded.
	StorageVersion string
	// Objects is how many objects the migration read, and Rewritten how
	// many of them the API server stored again: the others were in the
	// storage version already.
	Objects, Rewritten int
	// StoredVersions is the CRD's status.storedVersions before the
	// migration; after it, the storage version alone.
	StoredVersions []string
}

// pageSize is how many objects a list request of the migration reads.
const pageSize = 500

// Migrate stores every object of the CRD named crd in the CRD's storage
// version, then trims the CRD's status.storedVersions to it. It reads the
// objects a page at a time and writes each back as it read it; an object
// written or deleted by someone else meanwhile needs no write. It changes
// no object's content. A CRD whose storedVersions is already its storage
// version alone is left as it is, with no object read.
func Migrate(ctx context.Context, c client.Client, crd string) (Result, error) {
	def := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crd}, def); err != nil {
		return Result{}, fmt.Errorf("reading CustomResourceDefinition %s: %w", crd, err)
	}
	res := Result{StoredVersions: slices.Clone(def.Status.StoredVersions)}
	for _, v := range def.Spec.Versions {
		if v.Storage {
			res.StorageVersion = v.Name
		}
	}
	if res.StorageVersion == "" {
		return res, fmt.Errorf("CustomResourceDefinition %s has no storage version", crd)
	}
	if slices.Equal(res.StoredVersions, []string{res.StorageVersion}) {
		return res, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(def.Spec.Group + "/" + res.StorageVersion)
	list.SetKind(def.Spec.Names.ListKind)
	for {
		if err := c.List(ctx, list, client.Limit(pageSize), client.Continue(list.GetContinue())); err != nil {
			return res, fmt.Errorf("listing the %s: %w", def.Spec.Names.Plural, err)
		}
		for i := range list.Items {
			rewritten, err := rewrite(ctx, c, &list.Items[i])
			if err != nil {
				return res, err
			}
			res.Objects++
			if rewritten {
				res.Rewritten++
			}
		}
		if list.GetContinue() == "" {
			break
		}
	}
	// Only the storage version is left in etcd: the versions the CRD
	// stored before may go. The patch holds only if the CRD has not
	// changed since it was read, so that a storage version changed
	// meanwhile is not dropped.
	before := def.DeepCopy()
	def.Status.StoredVersions = []string{res.StorageVersion}
	if err := c.Status().Patch(ctx, def, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return res, fmt.Errorf("trimming the stored versions of CustomResourceDefinition %s: %w", crd, err)
	}
	return res, nil
}

// rewrite writes obj back as it is, and reports whether the API server
// stored it again. An object that someone wrote since it was read is read
// again and written back again: the other write may have come before the
// API server took the new storage version in. One gone needs nothing.
func rewrite(ctx context.Context, c client.Client, obj *unstructured.Unstructured) (bool, error) {
	for {
		read := obj.GetResourceVersion()
		err := c.Update(ctx, obj)
		if apierrors.IsConflict(err) {
			err = c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if err == nil {
				continue
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("writing %s %s back: %w", obj.GetKind(), client.ObjectKeyFromObject(obj), err)
		}
		return obj.GetResourceVersion() != read, nil
	}
}
