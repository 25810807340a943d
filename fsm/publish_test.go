package fsm_test

import (
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/graph"
)

// A machine publishes its graph on its resource's CRD when it starts,
// where tools read it without the operator's code; a restart with the
// same graph writes nothing, and a changed graph replaces the old one.
func TestUnderManagerAMachinePublishesItsGraphOnceOnItsCRD(t *testing.T) {
	e := newEnv(t)
	const name = "published"
	version := 1
	machine := func(*fsmtest.Env) *fsm.Machine[*gadget] {
		exits := []fsm.State{"End"}
		if version == 2 {
			exits = append(exits, "Extra")
		}
		m := fsm.New[*gadget](name, fsm.Lifecycle).
			Initial("Start").
			State("Start", done, fsm.To(exits...)).
			State("End", done, fsm.Final())
		if version == 2 {
			m.State("Extra", done, fsm.Final())
		}
		return m
	}
	l := runFunc(e, machine)
	publishedLines := func() int {
		n := 0
		for _, line := range l.logs.all() {
			if line.msg == "the machine's graph is published" && line.value("machine") == name {
				n++
			}
		}
		return n
	}
	e.fe.Await("the graph to be published", func() bool { return publishedLines() == 1 })
	crd, doc := publishedGraph(t, e, name)
	if doc.Machine != name || doc.Resource != (fsm.PublishedResource{Group: "testing.kfsm.dev", Version: "v1alpha1", Kind: "Gadget", Resource: "gadgets"}) || doc.KfsmVersion == "" {
		t.Errorf("published %+v, want machine %s driving testing.kfsm.dev/v1alpha1 Gadget (gadgets) with a kfsm version", doc, name)
	}
	g, err := graph.ParseJSON(doc.Graph)
	if err != nil {
		t.Fatalf("the published graph does not parse: %v", err)
	}
	if got, want := g.Mermaid(), machine(nil).Graph().Mermaid(); got != want {
		t.Errorf("the published graph draws as\n%s\nwant\n%s", got, want)
	}
	if n := l.published.Load(); n != 1 {
		t.Errorf("publishing wrote %d times, want 1", n)
	}
	// What it wrote is what GraphAnnotation makes, for a CRD's manifest.
	key, value, err := machine(nil).GraphAnnotation(doc.Resource)
	if err != nil {
		t.Fatal(err)
	}
	if got := crd.Annotations[key]; got != value {
		t.Errorf("the machine published\n%s\nGraphAnnotation makes\n%s", got, value)
	}

	l.op.Restart()
	e.fe.Await("the restarted machine to check its graph", func() bool { return publishedLines() == 2 })
	again, _ := publishedGraph(t, e, name)
	if n := l.published.Load(); n != 1 || again.ResourceVersion != crd.ResourceVersion {
		t.Errorf("a restart with the same graph wrote %d times (CRD version %s → %s), want none", n-1, crd.ResourceVersion, again.ResourceVersion)
	}

	version = 2
	l.op.Restart()
	e.fe.Await("the changed machine to publish", func() bool { return publishedLines() == 3 })
	if n := l.published.Load(); n != 2 {
		t.Errorf("a changed graph took %d writes, want 1", n-1)
	}
	_, doc = publishedGraph(t, e, name)
	if g, err := graph.ParseJSON(doc.Graph); err != nil || len(g.States) != 3 {
		t.Errorf("after the change the published graph is %s (%v), want its 3 states", doc.Graph, err)
	}
}

// An operator that may not patch its CRD writes nothing there: a CRD
// installed with the machine's annotation (GraphAnnotation's) costs it one
// read, and one without it a line in the log, once.
func TestUnderManagerAMachineThatMayNotPatchItsCRDOnlyReadsIt(t *testing.T) {
	e := newEnv(t)
	const name = "unpatched"
	machine := func(*fsmtest.Env) *fsm.Machine[*gadget] {
		return fsm.New[*gadget](name, fsm.Lifecycle).
			Initial("Start").
			State("Start", done, fsm.Final())
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, "gadgets.testing.kfsm.dev", nil)
	l := runFunc(e, machine, func(l *live) { l.inject(&fault{op: "publish", err: forbidden, times: 1 << 30}) })
	lines := func(msg string) int {
		n := 0
		for _, line := range l.logs.all() {
			if strings.HasPrefix(line.msg, msg) && line.value("machine") == name {
				n++
			}
		}
		return n
	}
	const differs = "the CRD does not carry the machine's graph, and the operator may not patch it"
	e.fe.Await("the operator to say that the CRD lacks the graph", func() bool { return lines(differs) == 1 })

	resource := fsm.PublishedResource{Group: "testing.kfsm.dev", Version: "v1alpha1", Kind: "Gadget", Resource: "gadgets"}
	key, value, err := machine(nil).GraphAnnotation(resource)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		t.Fatal(err)
	}
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	crd.SetName("gadgets.testing.kfsm.dev")
	if err := e.direct.Patch(t.Context(), crd, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	l.op.Restart()
	e.fe.Await("the restarted operator to find its graph on the CRD", func() bool { return lines("the machine's graph is published") == 1 })
	if n := lines(differs); n != 1 {
		t.Errorf("the operator said %d times that the CRD lacks the graph, want once, before the CRD carried it", n)
	}
	if n := l.published.Load(); n != 0 {
		t.Errorf("the operator patched its CRD %d times", n)
	}
}

// publishedGraph reads the graph that machine published on the Gadget CRD.
func publishedGraph(t *testing.T, e *env, machine string) (*metav1.PartialObjectMetadata, fsm.PublishedGraph) {
	t.Helper()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: "gadgets.testing.kfsm.dev"}, crd); err != nil {
		t.Fatal(err)
	}
	var doc fsm.PublishedGraph
	value, ok := crd.Annotations[fsm.AnnotationGraphPrefix+machine]
	if !ok {
		t.Fatalf("the Gadget CRD has no annotation %s%s; it has %v", fsm.AnnotationGraphPrefix, machine, crd.Annotations)
	}
	if err := json.Unmarshal([]byte(value), &doc); err != nil {
		t.Fatalf("the published graph is not JSON: %v\n%s", err, value)
	}
	return crd, doc
}
