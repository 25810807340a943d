package fsm

import (
	"bytes"
	"encoding/json"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/kfsm/kfsm/fsm/internal/publish"
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

// publishWith adds the machine's publisher to mgr.
func (m *Machine[T]) publishWith(mgr manager.Manager) error {
	gvk, err := apiutil.GVKForObject(newObject[T](), mgr.GetScheme())
	if err != nil {
		return err
	}
	g, err := m.Graph().CompactJSON()
	if err != nil {
		return err
	}
	return mgr.Add(&publish.Publisher{
		Machine: m.name, Key: AnnotationGraphPrefix + m.name, Same: sameGraph,
		Doc: func(resource string) (string, error) {
			return m.published(g, PublishedResource{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Resource: resource})
		},
		GVK: gvk, Mapper: mgr.GetRESTMapper(), Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(),
		Log: mgr.GetLogger().WithName("kfsm"), Retry: time.Second,
	})
}
