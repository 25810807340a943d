// Package publish publishes a machine's graph on the
// CustomResourceDefinition of its resource, once the manager runs.
package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// crdKind is the kind of the objects that carry published graphs.
var crdKind = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// Publisher checks, once the manager runs, that the CRD of the machine's
// resource carries the machine's graph, and publishes it there when it
// does not and the operator may patch the CRD. It is a runnable that
// needs the leader: during a rolling update it is the new leader's graph
// that stays.
type Publisher struct {
	Machine string
	// Doc is the annotation's value for the machine's resource.
	Doc func(resource string) (string, error)
	// Same says whether two annotation values publish the same graph.
	Same func(a, b string) bool
	// Key is the annotation's key.
	Key    string
	GVK    schema.GroupVersionKind
	Mapper meta.RESTMapper
	Reader client.Reader // reads the API server, not a cache
	Writer client.Client
	Log    logr.Logger
	Retry  time.Duration // the first wait after a failure; it doubles up to maxRetry
}

const maxPublishRetry = 5 * time.Minute

// Start checks and publishes the graph, retrying failures that may pass.
// It never stops the manager: a graph that cannot be published leaves the
// operator working, with the reason logged once.
func (p *Publisher) Start(ctx context.Context) error {
	wait := p.Retry
	for {
		wrote, err := p.publish(ctx)
		var differs *errDiffers
		switch {
		case err == nil:
			p.Log.V(1).Info("the machine's graph is published", "machine", p.Machine, "wrote", wrote)
			return nil
		case errors.As(err, &differs):
			p.Log.Info("the CRD does not carry the machine's graph, and the operator may not patch it: tools show the CRD's graph, or none; install the CRD with the annotation that Machine.GraphAnnotation makes",
				"machine", p.Machine, "crd", differs.crd, "annotation", p.Key)
			return nil
		case apierrors.IsForbidden(err), apierrors.IsNotFound(err), meta.IsNoMatchError(err), errors.Is(err, errBuiltIn):
			p.Log.Info("not publishing the machine's graph", "machine", p.Machine, "reason", err.Error())
			return nil
		}
		p.Log.Error(err, "publishing the machine's graph; retrying", "machine", p.Machine, "after", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, maxPublishRetry)
	}
}

// errBuiltIn says that the machine's resource has no CRD to carry its
// graph.
var errBuiltIn = errors.New("a built-in resource has no CustomResourceDefinition to carry the graph")

// errDiffers says that a CRD carries another graph than the machine's, or
// none, and that the operator may not patch it.
type errDiffers struct {
	crd string
	err error // the refusal of the patch
}

func (e *errDiffers) Error() string {
	return fmt.Sprintf("the CustomResourceDefinition %s does not carry the machine's graph: %v", e.crd, e.err)
}

func (e *errDiffers) Unwrap() error { return e.err }

// publish writes the annotation unless the CRD carries it already.
func (p *Publisher) publish(ctx context.Context) (wrote bool, err error) {
	mapping, err := p.Mapper.RESTMapping(p.GVK.GroupKind(), p.GVK.Version)
	if err != nil {
		return false, err
	}
	if mapping.Resource.Group == "" {
		return false, fmt.Errorf("%s: %w", mapping.Resource.Resource, errBuiltIn)
	}
	doc, err := p.Doc(mapping.Resource.Resource)
	if err != nil {
		return false, err
	}
	name := mapping.Resource.GroupResource().String()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdKind)
	if err := p.Reader.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return false, err
	}
	key := p.Key
	if p.Same(crd.GetAnnotations()[key], doc) {
		return false, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: doc}}})
	if err != nil {
		return false, err
	}
	if err := p.Writer.Patch(ctx, crd, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsForbidden(err) {
			return false, &errDiffers{crd: name, err: err}
		}
		return false, err
	}
	return true, nil
}
