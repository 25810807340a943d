package fsmtest

import (
	"bytes"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// An Await reads what it waits for, again and again, from the API
// server's watch cache: etcd serves none of those reads, and the first of
// them already sees what the test wrote just before. (Not parallel: the
// count of etcd's reads is the API server's, which other tests share.)
func TestAnAwaitReadsTheWatchCacheAtTheTestsOwnWrites(t *testing.T) {
	e := New(t)
	Run(e, fsm.New[*v1alpha1.Gadget]("cache-reads", fsm.Lifecycle).
		Initial("Idle").
		State("Idle", nil, fsm.Final()))
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	e.Create(g)
	e.AwaitReady(g)
	e.Update(g, func() { g.Spec.Mode = "read" })

	before := etcdGets(t)
	var looks []string
	e.Await("five looks at the gadget", func() bool {
		seen := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
		e.Get(seen)
		looks = append(looks, seen.Spec.Mode)
		return len(looks) == 5
	})
	if got := etcdGets(t) - before; got != 0 {
		t.Errorf("etcd served %v reads of gadgets during the Await, want none: its reads come from the watch cache", got)
	}
	if looks[0] != "read" {
		t.Errorf("the Await's first look saw mode %q, want %q, which the test wrote before it", looks[0], "read")
	}
	// Outside an Await, a read goes to etcd.
	before = etcdGets(t)
	e.Get(g)
	if got := etcdGets(t) - before; got != 1 {
		t.Errorf("etcd served %v reads of gadgets for a Get outside an Await, want 1", got)
	}
}

// The log of the operator's writes keeps the version that each answer
// carries, whatever its encoding: kfsm reads the answer of its status
// write as metadata alone, in protobuf. An Await's reads start from the
// versions of that log.
func TestTheWriteLogKeepsTheVersionOfEachAnswer(t *testing.T) {
	t.Parallel()
	e := New(t)
	Run(e, fsm.New[*v1alpha1.Gadget]("answer-versions", fsm.Lifecycle).
		Initial("Idle").
		State("Idle", nil, fsm.Final()))
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	e.Create(g)
	e.AwaitReady(g)
	var last *Write
	for _, w := range e.api.all() {
		if w.Subresource == "status" && w.Name == g.Name {
			last = &w
		}
	}
	switch {
	case last == nil:
		t.Fatal("the log holds no status write of the gadget")
	case last.ResourceVersion != g.ResourceVersion:
		t.Errorf("the log's last status write of the gadget has version %q, want %q, the gadget's as read after it", last.ResourceVersion, g.ResourceVersion)
	}
}

// etcdGets is how many reads of one gadget the API server has sent to
// etcd.
func etcdGets(t *testing.T) float64 {
	t.Helper()
	raw, err := discovery.NewDiscoveryClientForConfigOrDie(pkg.cluster.Config).RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the API server's metrics: %v", err)
	}
	total := 0.0
	for _, m := range families["etcd_request_duration_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["operation"] == "get" && labels["group"] == v1alpha1.GroupVersion.Group && labels["resource"] == "gadgets" {
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}
