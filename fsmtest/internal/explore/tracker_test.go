package explore

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

func answer(body string) *http.Response {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewBufferString(body))}
}

// The world at a point is each object as the operator's writes left it,
// however they were made: what differs between two correct runs (UIDs,
// versions, times), wherever it hides, and the status that other
// controllers write do not make a point new.
func TestTheWorldIsObjectsAsWrittenNotTheWritesHistory(t *testing.T) {
	key := Object{Group: "apps", Resource: "deployments"}
	world := func(body string) uint64 {
		tr := NewTracker(World{Namespace: "ns"}, true)
		resp := answer(body)
		tr.Answered(key, nil, resp)
		if got, _ := io.ReadAll(resp.Body); string(got) != body {
			t.Errorf("the operator got %q back, not the answer %q", got, body)
		}
		if len(tr.last) != 1 {
			t.Fatalf("the world has %d objects, want 1: %v", len(tr.last), tr.last)
		}
		for k, d := range tr.last {
			if k.Name != "web" {
				t.Errorf("a create's object is filed under %q, want its name web", k.Name)
			}
			return d
		}
		return 0
	}
	created := world(`{"metadata":{"name":"web","uid":"0f8fad5b-d9cb-469f-a165-70867728950e","resourceVersion":"41","creationTimestamp":"2026-11-27T10:00:00Z"},"spec":{"replicas":2},"status":{"replicas":0}}`)
	applied := world(`{"metadata":{"name":"web","uid":"7c9e6679-7425-40de-944b-e07fc1f90ae7","resourceVersion":"97","creationTimestamp":"2026-11-27T11:00:00Z","managedFields":[{"manager":"kfsm"}]},"spec":{"replicas":2},"status":{"replicas":2,"availableReplicas":2}}`)
	if created != applied {
		t.Errorf("one Deployment created in one run and applied in another makes two worlds")
	}
	if scaled := world(`{"metadata":{"name":"web"},"spec":{"replicas":3}}`); scaled == created {
		t.Errorf("Deployments of 2 and 3 replicas make one world")
	}

	tr := NewTracker(World{Namespace: "ns"}, true)
	patch := func(uid, rv string) uint64 {
		return tr.digest([]byte(`[{"op":"replace","path":"/metadata/managedFields","value":[{"fieldsV1":{"f:metadata":{"f:ownerReferences":{"k:{\"uid\":\"` + uid + `\"}":{}}}}}]},{"op":"replace","path":"/metadata/resourceVersion","value":"` + rv + `"}]`))
	}
	if patch("0f8fad5b-d9cb-469f-a165-70867728950e", "242") != patch("7c9e6679-7425-40de-944b-e07fc1f90ae7", "310") {
		t.Errorf("one managed-fields patch in two runs, with their own UIDs and versions, has two digests")
	}
	if tr.digest([]byte(`[{"op":"replace","path":"/spec/replicas","value":2}]`)) == tr.digest([]byte(`[{"op":"replace","path":"/spec/replicas","value":3}]`)) {
		t.Errorf("JSON patches that set different replicas have one digest")
	}

	// A watch event's key leaves out the status of a resource whose status
	// the operator never wrote, and keeps it once it did.
	event := func(tr *Tracker, n int) uint64 {
		_, seq := tr.Event("deployments", "MODIFIED", []byte(`{"metadata":{"name":"web"},"spec":{"replicas":2},"status":{"readyReplicas":`+strconv.Itoa(n)+`}}`))
		return tr.points[seq-1].Key
	}
	others := NewTracker(World{Namespace: "ns"}, true)
	if event(others, 1) != event(others, 2) {
		t.Errorf("events that differ only in a status others write have two keys")
	}
	mine := NewTracker(World{Namespace: "ns"}, true)
	mine.statuses["deployments"] = true
	if event(mine, 1) == event(mine, 2) {
		t.Errorf("events that differ in a status the operator writes have one key")
	}
}

// A run that Explore extends no further records the same points, with the
// same faults and names, but gives them no key: nothing reads it, and a
// key costs decoding every write and event. The operator's request is
// sent whole either way.
func TestARunAtTheDepthRecordsPointsWithoutKeys(t *testing.T) {
	points := func(keyed bool) []Point {
		tr := NewTracker(World{Namespace: "ns"}, keyed)
		body := `{"metadata":{"name":"web"},"spec":{"replicas":2}}`
		req, err := http.NewRequest(http.MethodPatch, "https://api/apis/apps/v1/namespaces/ns/deployments/web", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		tr.Write(req, Write{To: Object{Group: "apps", Resource: "deployments", Name: "web"}, Res: "deployments/web", N: 1, Verb: "patch"})
		if got, _ := io.ReadAll(req.Body); string(got) != body {
			t.Errorf("keyed %t: the API server would get %q, not %q", keyed, got, body)
		}
		resp := answer(body)
		tr.Answered(Object{Group: "apps", Resource: "deployments", Name: "web"}, req, resp)
		_ = resp.Body.Close()
		tr.Event("deployments", "MODIFIED", []byte(body))
		return tr.points
	}
	keyed, unkeyed := points(true), points(false)
	if len(keyed) != 2 || len(unkeyed) != 2 {
		t.Fatalf("points: %d keyed, %d unkeyed; want a write's and an event's each", len(keyed), len(unkeyed))
	}
	for i := range keyed {
		k, u := keyed[i], unkeyed[i]
		if k.Seq != u.Seq || k.What != u.What || !slices.Equal(k.Atoms, u.Atoms) {
			t.Errorf("point %d: %+v keyed, %+v unkeyed; want the same seq, faults and name", i, k, u)
		}
		if k.Key == 0 || u.Key != 0 {
			t.Errorf("point %d: key %d keyed, %d unkeyed; want a key only where the run is extended", i, k.Key, u.Key)
		}
	}
}

// A write answered with the object's metadata alone, in protobuf as kfsm
// asks of its status writes, leaves the world that the whole answer
// would: the object as the operator last left it, changed as the write's
// merge patch says, with the answer's metadata.
func TestAWriteAnsweredWithMetadataAloneLeavesTheObjectItPatched(t *testing.T) {
	key := Object{Group: "testing.kfsm.dev", Resource: "gadgets", Name: "g"}
	created := `{"kind":"Gadget","apiVersion":"testing.kfsm.dev/v1alpha1","metadata":{"name":"g","namespace":"ns","resourceVersion":"10","finalizers":["kfsm.dev/g"]},"spec":{"target":2}}`
	patched := func(status string) string {
		return `{"kind":"Gadget","apiVersion":"testing.kfsm.dev/v1alpha1","metadata":{"name":"g","namespace":"ns","resourceVersion":"11"},"spec":{"target":2},"status":` + status + `}`
	}
	metadataAlone := func() string {
		var b bytes.Buffer
		obj := &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
			ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", ResourceVersion: "11"},
		}
		if err := protobuf.NewSerializer(nil, nil).Encode(obj, &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}()
	world := func(patch, answered string) uint64 {
		tr := NewTracker(World{Namespace: "ns"}, true)
		tr.statuses["gadgets"] = true
		first := answer(created)
		tr.Answered(key, nil, first)
		_ = first.Body.Close()
		req, err := http.NewRequest(http.MethodPatch, "https://api/apis/testing.kfsm.dev/v1alpha1/namespaces/ns/gadgets/g/status", bytes.NewBufferString(patch))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/merge-patch+json")
		tr.Write(req, Write{To: key, Res: "gadgets/g", N: 2, Verb: "patch", Subresource: "status"})
		resp := answer(answered)
		tr.Answered(key, req, resp)
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(got) != answered {
			t.Errorf("the operator got %q back, not the answer %q", got, answered)
		}
		return tr.last[key]
	}
	const ready = `{"state":"Ready","conditions":[{"type":"Ready","status":"True"}]}`
	whole := world(`{"metadata":{"finalizers":null},"status":`+ready+`}`, patched(ready))
	if alone := world(`{"metadata":{"finalizers":null},"status":`+ready+`}`, metadataAlone); alone != whole {
		t.Errorf("a status patch answered with metadata alone makes another world than the whole answer")
	}
	if other := world(`{"status":{"state":"Failed"}}`, metadataAlone); other == whole {
		t.Errorf("status patches to Ready and to Failed, answered with metadata alone, make one world")
	}
}
