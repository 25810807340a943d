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
}

// PublishedResource names a resource in a PublishedGraph.
type PublishedResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Kind     string `json:"kind"`
	Resource string `json:"resource"`
}

// crdKind is the kind of the objects that carry published graphs.
var crdKind = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

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
	g, err := m.compactGraph()
	if err != nil {
		return "", "", err
	}
	value, err = publishedGraph(m.name, g, resource)
	return AnnotationGraphPrefix + m.name, value, err
}

// compactGraph is the machine's graph as graph.Graph's JSON writes it,
// without spaces.
func (m *Machine[T]) compactGraph() ([]byte, error) {
	doc, err := m.Graph().JSON()
	if err != nil {
		return nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

// publishedGraph is the value of a machine's annotation.
func publishedGraph(machine string, graph []byte, resource PublishedResource) (string, error) {
	doc, err := json.Marshal(PublishedGraph{Machine: machine, Resource: resource, KfsmVersion: Version(), Graph: graph})
	return string(doc), err
}

// publisher checks, once the manager runs, that the CRD of the machine's
// resource carries the machine's graph, and publishes it there when it
// does not and the operator may patch the CRD. It is a runnable that
// needs the leader: during a rolling update it is the new leader's graph
// that stays.
type publisher struct {
	machine string
	graph   []byte
	gvk     schema.GroupVersionKind
	mapper  meta.RESTMapper
	reader  client.Reader // reads the API server, not a cache
	writer  client.Client
	log     logr.Logger
	retry   time.Duration // the first wait after a failure; it doubles up to maxRetry
}

const maxPublishRetry = 5 * time.Minute

// Start checks and publishes the graph, retrying failures that may pass.
// It never stops the manager: a graph that cannot be published leaves the
// operator working, with the reason logged once.
func (p *publisher) Start(ctx context.Context) error {
	wait := p.retry
	for {
		wrote, err := p.publish(ctx)
		var differs *errDiffers
		switch {
		case err == nil:
			p.log.V(1).Info("the machine's graph is published", "machine", p.machine, "wrote", wrote)
			return nil
		case errors.As(err, &differs):
			p.log.Info("the CRD does not carry the machine's graph, and the operator may not patch it: tools show the CRD's graph, or none; install the CRD with the annotation that Machine.GraphAnnotation makes",
				"machine", p.machine, "crd", differs.crd, "annotation", AnnotationGraphPrefix+p.machine)
			return nil
		case apierrors.IsForbidden(err), apierrors.IsNotFound(err), meta.IsNoMatchError(err), errors.Is(err, errBuiltIn):
			p.log.Info("not publishing the machine's graph", "machine", p.machine, "reason", err.Error())
			return nil
		}
		p.log.Error(err, "publishing the machine's graph; retrying", "machine", p.machine, "after", wait)
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
func (p *publisher) publish(ctx context.Context) (wrote bool, err error) {
	mapping, err := p.mapper.RESTMapping(p.gvk.GroupKind(), p.gvk.Version)
	if err != nil {
		return false, err
	}
	if mapping.Resource.Group == "" {
		return false, fmt.Errorf("%s: %w", mapping.Resource.Resource, errBuiltIn)
	}
	doc, err := publishedGraph(p.machine, p.graph, PublishedResource{
		Group: p.gvk.Group, Version: p.gvk.Version, Kind: p.gvk.Kind, Resource: mapping.Resource.Resource,
	})
	if err != nil {
		return false, err
	}
	name := mapping.Resource.GroupResource().String()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdKind)
	if err := p.reader.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return false, err
	}
	key := AnnotationGraphPrefix + p.machine
	if sameGraph(crd.GetAnnotations()[key], doc) {
		return false, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: doc}}})
	if err != nil {
		return false, err
	}
	if err := p.writer.Patch(ctx, crd, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsForbidden(err) {
			return false, &errDiffers{crd: name, err: err}
		}
		return false, err
	}
	return true, nil
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

// publishWith adds the machine's publisher to mgr.
func (m *Machine[T]) publishWith(mgr manager.Manager) error {
	gvk, err := apiutil.GVKForObject(newObject[T](), mgr.GetScheme())
	if err != nil {
		return err
	}
	g, err := m.compactGraph()
	if err != nil {
		return err
	}
	return mgr.Add(&publisher{
		machine: m.name, graph: g, gvk: gvk,
		mapper: mgr.GetRESTMapper(), reader: mgr.GetAPIReader(), writer: mgr.GetClient(),
		log: mgr.GetLogger().WithName("kfsm"), retry: time.Second,
	})
}
