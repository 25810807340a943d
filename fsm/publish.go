package fsm

import (
	"bytes"
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
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/internal/buildinfo"
)

// AnnotationGraphPrefix starts the annotation in which a machine publishes
// its graph on the CustomResourceDefinition of the resource it drives; the
// machine's name ends it: graph.kfsm.dev/<machine>. Its value is a
// PublishedGraph in JSON.
const AnnotationGraphPrefix = "graph.kfsm.dev/"

// PublishedGraph is what a machine publishes about itself, so that tools
// (kubectl fsm, the dashboard) can draw it and place objects on it without
// the operator's code.
type PublishedGraph struct {
	// Machine is the machine's name.
	Machine string `json:"machine"`
	// Resource is the resource the machine drives, at the version the
	// operator reads.
	Resource PublishedResource `json:"resource"`
	// KfsmVersion is the version of the kfsm module the operator was built
	// with.
	KfsmVersion string `json:"kfsmVersion"`
	// Graph is the graph as graph.Graph's JSON writes it; graph.ParseJSON
	// reads it back.
	Graph json.RawMessage `json:"graph"`
	// Earlier holds the graphs of the machine's earlier versions, by
	// version, as a project's lock keeps them (graph.Lock.Earlier), so
	// that tools draw an object not yet migrated on its own graph.
	Earlier map[string]json.RawMessage `json:"earlier,omitempty"`
}

// PublishedResource names a resource in a PublishedGraph.
type PublishedResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Kind     string `json:"kind"`
	Resource string `json:"resource"`
}

// PublishGraph turns off (or back on) publishing the machine's graph on
// the CustomResourceDefinition of its resource. It is on by default; see
// "The graph in the cluster" in the package doc.
func (m *Machine[T]) PublishGraph(on bool) *Machine[T] {
	m.noPublish = !on
	return m
}

// GraphAnnotation returns the annotation in which the machine publishes
// its graph on the CustomResourceDefinition of resource: its key,
// graph.kfsm.dev/<machine>, and its value, a [PublishedGraph] in JSON, as
// the machine writes it on its CRD when it may, once it starts. A
// project's code generation writes it into the CRD's manifest, so that
// the CRD carries the graph from the moment it is installed and the
// operator needs no right to write CRDs. A machine whose CRD carries the
// same machine, resource and graph writes nothing, whichever version of
// kfsm the annotation names.
func (m *Machine[T]) GraphAnnotation(resource PublishedResource) (key, value string, err error) {
	g, err := m.Graph().CompactJSON()
	if err != nil {
		return "", "", err
	}
	value, err = m.published(g, resource)
	return AnnotationGraphPrefix + m.name, value, err
}

// published is the value of the machine's annotation.
func (m *Machine[T]) published(graph []byte, resource PublishedResource) (string, error) {
	doc, err := json.Marshal(PublishedGraph{Machine: m.name, Resource: resource, KfsmVersion: Version(), Graph: graph})
	return string(doc), err
}

// sameGraph says whether two annotations publish the same machine, resource
// and graph. The version of kfsm may differ: it says which kfsm wrote the
// annotation, which a binary built in a test, or from a checkout, does
// not always know.
func sameGraph(a, b string) bool {
	var ga, gb PublishedGraph
	if json.Unmarshal([]byte(a), &ga) != nil || json.Unmarshal([]byte(b), &gb) != nil {
		return false
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, ga.Graph) != nil || json.Compact(&cb, gb.Graph) != nil {
		return false
	}
	return ga.Machine == gb.Machine && ga.Resource == gb.Resource && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// Version is the version of the kfsm module built into this binary, as Go
// records it: a tag such as v0.3.0, a pseudo-version, or "(devel)" when
// the binary was built inside kfsm's own source tree.
func Version() string { return buildinfo.Version() }

// crdKind is the kind of the objects that carry published graphs.
var crdKind = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// errBuiltIn says that the machine's resource has no CRD to carry its
// graph.
var errBuiltIn = errors.New("a built-in resource has no CustomResourceDefinition to carry the graph")

// publishWith adds to mgr the runnable that checks, once the manager runs,
// that the CRD of the machine's resource carries the machine's graph, and
// publishes it there when it does not and the operator may patch the CRD.
// It needs the leader: during a rolling update it is the new leader's
// graph that stays. It never stops the manager: a graph that cannot be
// published leaves the operator working, with the reason logged once;
// failures that may pass are retried after 1 s, and twice as long each
// time up to 5 minutes.
func (m *Machine[T]) publishWith(mgr manager.Manager) error {
	gvk, err := apiutil.GVKForObject(newObject[T](), mgr.GetScheme())
	if err != nil {
		return err
	}
	g, err := m.Graph().CompactJSON()
	if err != nil {
		return err
	}
	log := mgr.GetLogger().WithName("kfsm").WithValues("machine", m.name)
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for wait := time.Second; ; wait = min(2*wait, 5*time.Minute) {
			err := m.publish(ctx, mgr, gvk, g, log)
			switch {
			case err == nil, errors.Is(err, context.Canceled): // published, or the manager stopped meanwhile
				return nil
			case apierrors.IsForbidden(err), apierrors.IsNotFound(err), meta.IsNoMatchError(err), errors.Is(err, errBuiltIn):
				log.Info("not publishing the machine's graph", "reason", err.Error())
				return nil
			}
			log.Error(err, "publishing the machine's graph; retrying", "after", wait)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
	}))
}

// publish writes the annotation of graph g unless the CRD carries it
// already.
func (m *Machine[T]) publish(ctx context.Context, mgr manager.Manager, gvk schema.GroupVersionKind, g []byte, log logr.Logger) error {
	mapping, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	if mapping.Resource.Group == "" {
		return fmt.Errorf("%s: %w", mapping.Resource.Resource, errBuiltIn)
	}
	doc, err := m.published(g, PublishedResource{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Resource: mapping.Resource.Resource})
	if err != nil {
		return err
	}
	name := mapping.Resource.GroupResource().String()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdKind)
	if err := mgr.GetAPIReader().Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return err
	}
	key := AnnotationGraphPrefix + m.name
	wrote := !sameGraph(crd.GetAnnotations()[key], doc)
	if wrote {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: doc}}}) // maps of strings: no error
		switch err := mgr.GetClient().Patch(ctx, crd, client.RawPatch(types.MergePatchType, patch)); {
		case apierrors.IsForbidden(err):
			log.Info("the CRD does not carry the machine's graph, and the operator may not patch it: tools show the CRD's graph, or none; install the CRD with the annotation that Machine.GraphAnnotation makes",
				"crd", name, "annotation", key, "reason", err.Error())
			return nil
		case err != nil:
			return err
		}
	}
	log.V(1).Info("the machine's graph is published", "wrote", wrote)
	return nil
}
