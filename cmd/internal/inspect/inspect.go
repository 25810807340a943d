// Package inspect reads kfsm machines and their objects from a cluster,
// without the operator's code: the graph that a machine publishes on its
// resource's CRD, and the objects with the status kfsm keeps. kubectl fsm
// and the dashboard are built on it; it only reads.
package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/graph"
)

// Cluster is what inspect reads with.
type Cluster struct {
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	Mapper   meta.RESTMapper
}

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Machine is a machine as its operator published it.
type Machine struct {
	fsm.PublishedGraph
	Graph *graph.Graph
	// Earlier holds the graphs of the machine's earlier versions that the
	// annotation carries, by version.
	Earlier    map[int]*graph.Graph
	GVR        schema.GroupVersionResource
	Namespaced bool
}

// VersionNote says, for an object recorded at graph version v, what it
// waits for when that is not the machine's version; "" when it is.
func (m *Machine) VersionNote(v int32) string {
	have, want := max(int(v), 1), max(m.Graph.Version, 1)
	switch {
	case have < want:
		return fmt.Sprintf("graph version %d, the machine's is %d: the operator migrates it when it next reads it", have, want)
	case have > want:
		return fmt.Sprintf("graph version %d, the machine's is %d: a newer operator wrote it, and this one leaves it alone", have, want)
	}
	return ""
}

// GraphOf returns the graph of an object recorded at graph version v (0,
// for an object without, is version 1): the machine's, or an earlier
// one's that the annotation carries. The second result is false when the
// object is not at the machine's version.
func (m *Machine) GraphOf(v int32) (*graph.Graph, bool) {
	v = max(v, 1)
	if int(v) == max(m.Graph.Version, 1) {
		return m.Graph, true
	}
	if g, ok := m.Earlier[int(v)]; ok {
		return g, false
	}
	return m.Graph, false
}

// Resolve finds the machine that drives the resource that arg names, as
// kubectl names resources: "moose", "mo", "moose.examples.kfsm.dev",
// "Moose". A CRD that carries several machines' graphs needs the machine
// named with "resource:machine".
func (c Cluster) Resolve(ctx context.Context, arg string) (*Machine, error) {
	resource, machine, _ := strings.Cut(arg, ":")
	mapping, err := c.mapping(resource)
	if err != nil {
		return nil, err
	}
	crd, err := c.Metadata.Resource(crds).Get(ctx, mapping.Resource.GroupResource().String(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s has no CustomResourceDefinition, so no kfsm machine published a graph for it", mapping.Resource.GroupResource())
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CustomResourceDefinition of %s: %w", mapping.Resource.GroupResource(), err)
	}
	found, err := published(crd.Annotations)
	if err != nil {
		return nil, fmt.Errorf("CustomResourceDefinition %s: %w", crd.Name, err)
	}
	var names []string
	for _, m := range found {
		names = append(names, m.Machine)
	}
	switch {
	case len(found) == 0:
		return nil, fmt.Errorf("no kfsm machine has published a graph for %s: is its operator running, with get and patch on CustomResourceDefinition %s?", mapping.Resource.GroupResource(), crd.Name)
	case machine == "" && len(found) > 1:
		return nil, fmt.Errorf("several machines drive %s (%s): name one as %s:<machine>", mapping.Resource.GroupResource(), strings.Join(names, ", "), resource)
	}
	for _, m := range found {
		if machine == "" || m.Machine == machine {
			m.GVR = mapping.Resource
			m.Namespaced = mapping.Scope.Name() == meta.RESTScopeNameNamespace
			return m, nil
		}
	}
	return nil, fmt.Errorf("no machine %q drives %s; there is %s", machine, mapping.Resource.GroupResource(), strings.Join(names, ", "))
}

// Machines lists every machine that published a graph in the cluster.
func (c Cluster) Machines(ctx context.Context) ([]*Machine, error) {
	list, err := c.Metadata.Resource(crds).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing CustomResourceDefinitions: %w", err)
	}
	var out []*Machine
	for _, crd := range list.Items {
		found, err := published(crd.Annotations)
		if err != nil {
			return nil, fmt.Errorf("CustomResourceDefinition %s: %w", crd.Name, err)
		}
		for _, m := range found {
			mapping, err := c.Mapper.RESTMapping(schema.GroupKind{Group: m.Resource.Group, Kind: m.Resource.Kind}, m.Resource.Version)
			if err != nil {
				return nil, fmt.Errorf("machine %s: %w", m.Machine, err)
			}
			m.GVR = mapping.Resource
			m.Namespaced = mapping.Scope.Name() == meta.RESTScopeNameNamespace
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Machine < out[j].Machine })
	return out, nil
}

// mapping resolves a resource as kubectl does: plural, singular, short
// name or kind, optionally qualified by its group.
func (c Cluster) mapping(arg string) (*meta.RESTMapping, error) {
	gvr, gr := schema.ParseResourceArg(strings.ToLower(arg))
	candidates := []schema.GroupVersionResource{gr.WithVersion("")}
	if gvr != nil {
		candidates = append([]schema.GroupVersionResource{*gvr}, candidates...)
	}
	var lastErr error
	for _, want := range candidates {
		full, err := c.Mapper.ResourceFor(want)
		if err != nil {
			lastErr = err
			continue
		}
		gvk, err := c.Mapper.KindFor(full)
		if err != nil {
			lastErr = err
			continue
		}
		return c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if meta.IsNoMatchError(lastErr) {
		return nil, fmt.Errorf("the server doesn't have a resource type %q", arg)
	}
	return nil, fmt.Errorf("resolving the resource type %q: %w", arg, lastErr)
}

// published reads the graphs that machines published in annotations.
func published(annotations map[string]string) ([]*Machine, error) {
	var keys []string
	for k := range annotations {
		if strings.HasPrefix(k, fsm.AnnotationGraphPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []*Machine
	for _, k := range keys {
		m := &Machine{Earlier: map[int]*graph.Graph{}}
		if err := json.Unmarshal([]byte(annotations[k]), &m.PublishedGraph); err != nil {
			return nil, fmt.Errorf("annotation %s is not a published graph: %w", k, err)
		}
		g, err := graph.ParseJSON(m.PublishedGraph.Graph)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", k, err)
		}
		m.Graph = g
		for version, doc := range m.PublishedGraph.Earlier {
			v, err := strconv.Atoi(version)
			if err != nil {
				return nil, fmt.Errorf("annotation %s: earlier version %q is not a number", k, version)
			}
			if m.Earlier[v], err = graph.ParseJSON(doc); err != nil {
				return nil, fmt.Errorf("annotation %s: version %d: %w", k, v, err)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// Object is an object that a machine drives, as its status tells.
type Object struct {
	Namespace, Name string
	UID             string
	Created         time.Time
	Deleting        bool
	Paused          bool
	Generation      int64
	RetryAnnotation string
	Status          fsm.Status
	Unstructured    *unstructured.Unstructured
}

// Condition returns the condition of type t, or nil.
func (o Object) Condition(t string) *metav1.Condition {
	return meta.FindStatusCondition(o.Status.Conditions, t)
}

// Indeterminate tells whether the object is Stalled on the action of rec:
// the status marks no record indeterminate, but the Stalled condition's
// message holds the key of the action that stalled it.
func (o Object) Indeterminate(rec fsm.ActionRecord) bool {
	c := o.Condition(fsm.ConditionStalled)
	return rec.Outcome == "" && rec.Key != "" && c != nil && c.Status == metav1.ConditionTrue &&
		c.Reason == fsm.ReasonActionIndeterminate && strings.Contains(c.Message, rec.Key)
}

// Objects lists the machine's objects in namespace ("" for all).
func (c Cluster) Objects(ctx context.Context, m *Machine, namespace string) ([]Object, error) {
	var ri dynamic.ResourceInterface = c.Dynamic.Resource(m.GVR)
	if m.Namespaced && namespace != "" {
		ri = c.Dynamic.Resource(m.GVR).Namespace(namespace)
	}
	list, err := ri.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", m.GVR.GroupResource(), err)
	}
	out := make([]Object, 0, len(list.Items))
	for i := range list.Items {
		o, err := FromUnstructured(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

var leases = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// ShardHolders tells which replica holds each object of a sharded machine
// (see sharding.Shards), from the replicas' Leases in every namespace; ok is
// false when the machine is not sharded or the Leases cannot be read.
func (c Cluster) ShardHolders(ctx context.Context, m *Machine) (holder func(types.UID) string, ok bool) {
	list, err := c.Dynamic.Resource(leases).List(ctx, metav1.ListOptions{LabelSelector: sharding.LabelShards})
	if err != nil {
		return nil, false
	}
	typed := make([]coordinationv1.Lease, len(list.Items))
	for i := range list.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &typed[i]); err != nil {
			return nil, false
		}
	}
	return sharding.Holders(typed, m.Machine)
}

// Object reads one of the machine's objects.
func (c Cluster) Object(ctx context.Context, m *Machine, namespace, name string) (Object, error) {
	var ri dynamic.ResourceInterface = c.Dynamic.Resource(m.GVR)
	if m.Namespaced {
		ri = c.Dynamic.Resource(m.GVR).Namespace(namespace)
	}
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Object{}, err
	}
	return FromUnstructured(u)
}

// FromUnstructured reads the kfsm status of an object.
func FromUnstructured(u *unstructured.Unstructured) (Object, error) {
	o := Object{
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()),
		Created: u.GetCreationTimestamp().Time, Deleting: u.GetDeletionTimestamp() != nil,
		Paused: u.GetAnnotations()[fsm.AnnotationPaused] == "true", Generation: u.GetGeneration(),
		RetryAnnotation: u.GetAnnotations()[fsm.AnnotationRetry], Unstructured: u,
	}
	if status, ok := u.Object["status"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(status, &o.Status); err != nil {
			return o, fmt.Errorf("%s/%s: reading its status: %w", u.GetNamespace(), u.GetName(), err)
		}
	}
	return o, nil
}
