package fsmtest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/kfsm/kfsm/fsm"
)

func answer(body string) *http.Response {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewBufferString(body))}
}

// The world at a point is each object as the operator's writes left it,
// however they were made: what differs between two correct runs (UIDs,
// versions, times), wherever it hides, and the status that other
// controllers write do not make a point new.
func TestTheWorldIsObjectsAsWrittenNotTheWritesHistory(t *testing.T) {
	key := apiKey{Group: "apps", Resource: "deployments", Namespace: "ns"}
	world := func(body string) uint64 {
		tr := newTracker(&Env{Namespace: "ns"}, true)
		resp := answer(body)
		tr.answered(key, nil, resp)
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

	tr := newTracker(&Env{Namespace: "ns"}, true)
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
	event := func(tr *tracker, n int) uint64 {
		_, seq := tr.event("deployments", "MODIFIED", []byte(`{"metadata":{"name":"web"},"spec":{"replicas":2},"status":{"readyReplicas":`+strconv.Itoa(n)+`}}`))
		return tr.points[seq-1].key
	}
	others := newTracker(&Env{Namespace: "ns"}, true)
	if event(others, 1) != event(others, 2) {
		t.Errorf("events that differ only in a status others write have two keys")
	}
	mine := newTracker(&Env{Namespace: "ns"}, true)
	mine.statuses["deployments"] = true
	if event(mine, 1) == event(mine, 2) {
		t.Errorf("events that differ in a status the operator writes have one key")
	}
}

// A write's fault strikes the write to the object it was found at,
// however the operator's writes to other objects interleave with it: on
// a loaded machine two moose's walks take turns otherwise from one run
// to the next, and a fault at milo's meal, found in the clean run, must
// strike milo's meal in the run made of it, and in its replay. A create,
// whose path has no name, counts among the writes of the object its body
// names.
func TestAWriteFaultStrikesItsObjectsWriteHoweverWritesInterleave(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"metadata":{"name":"x"}}`)
	}))
	defer api.Close()
	// run makes the writes of order, by object name, a create of
	// configmap c first, under schedule s; it returns the run's points
	// and the indexes in order of the writes that failed.
	run := func(s schedule, order ...string) ([]point, []int) {
		f := scheduled(s, 0)
		f.trace = newTracker(&Env{Namespace: "ns"}, false)
		tr := &transport{next: api.Client().Transport, api: newAPILog(), life: &life{faults: f, onCrash: func() {}}}
		write := func(method, path, body string) error {
			req, err := http.NewRequest(method, api.URL+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/merge-patch+json")
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}
		if err := write(http.MethodPost, "/api/v1/namespaces/ns/configmaps", `{"metadata":{"name":"c"}}`); err != nil {
			t.Fatalf("the create failed: %v", err)
		}
		var failed []int
		for i, name := range order {
			if write(http.MethodPatch, "/apis/example.dev/v1/namespaces/ns/moose/"+name+"/status", `{"status":{}}`) != nil {
				failed = append(failed, i)
			}
		}
		return f.trace.points, failed
	}

	clean, _ := run(nil, "mabel", "milo", "milo", "mabel")
	if got := clean[0].atoms[0].String(); got != "crash:configmaps/c:1" {
		t.Errorf("the create's crash is %s, want crash:configmaps/c:1: the object its body names, its first write", got)
	}
	var meal atom // the fault at milo's second write
	for _, p := range clean[3].atoms {
		if p.Kind == atomFail {
			meal = p
		}
	}
	if got := meal.String(); got != "fail:moose/milo:2" {
		t.Errorf("the clean run's fourth write, milo's second, fails as %q, want fail:moose/milo:2", got)
	}
	// The replay: mabel's walks run ahead of milo's this time.
	if _, failed := run(schedule{meal}, "mabel", "mabel", "milo", "milo"); !slices.Equal(failed, []int{3}) {
		t.Errorf("%s failed the writes %v of mabel, mabel, milo, milo; want [3], milo's second", meal, failed)
	}
}

// A run that Explore extends no further records the same points, with the
// same faults and names, but gives them no key: nothing reads it, and a
// key costs decoding every write and event. The operator's request is
// sent whole either way.
func TestARunAtTheDepthRecordsPointsWithoutKeys(t *testing.T) {
	points := func(keyed bool) []point {
		tr := newTracker(&Env{Namespace: "ns"}, keyed)
		body := `{"metadata":{"name":"web"},"spec":{"replicas":2}}`
		req, err := http.NewRequest(http.MethodPatch, "https://api/apis/apps/v1/namespaces/ns/deployments/web", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		tr.write(req, "deployments/web", 1, Write{Verb: "patch", apiKey: apiKey{Group: "apps", Resource: "deployments", Namespace: "ns", Name: "web"}})
		if got, _ := io.ReadAll(req.Body); string(got) != body {
			t.Errorf("keyed %t: the API server would get %q, not %q", keyed, got, body)
		}
		resp := answer(body)
		tr.answered(apiKey{Group: "apps", Resource: "deployments", Namespace: "ns", Name: "web"}, req, resp)
		_ = resp.Body.Close()
		tr.event("deployments", "MODIFIED", []byte(body))
		return tr.points
	}
	keyed, unkeyed := points(true), points(false)
	if len(keyed) != 2 || len(unkeyed) != 2 {
		t.Fatalf("points: %d keyed, %d unkeyed; want a write's and an event's each", len(keyed), len(unkeyed))
	}
	for i := range keyed {
		k, u := keyed[i], unkeyed[i]
		if k.seq != u.seq || k.what != u.what || !slices.Equal(k.atoms, u.atoms) {
			t.Errorf("point %d: %+v keyed, %+v unkeyed; want the same seq, faults and name", i, k, u)
		}
		if k.key == 0 || u.key != 0 {
			t.Errorf("point %d: key %d keyed, %d unkeyed; want a key only where the run is extended", i, k.key, u.key)
		}
	}
}

// A walk that the change's own watch event started may end before the
// write returns to the scenario (on a loaded machine it did): it is a walk
// after the change, which an Await after a jump of the clock waits for.
func TestAWalkThatEndsBeforeTheWriteReturnsComesAfterTheChange(t *testing.T) {
	e := &Env{Namespace: "ns", walks: &walkLog{}}
	s := &snapshots{trace: newTracker(e, true), holdUntil: -1}
	walks := e.walks.count()
	// The write, during which the operator walks the object.
	e.walks.walks = append(e.walks.walks, machineWalk{machine: "m", Walk: fsm.Walk{UID: "g"}})
	s.change("update Gadget/g", walks)
	if got := s.trace.sinceChange(); got != walks {
		t.Errorf("the walks after the change start at %d, want %d: the walk that its own event started would come before it", got, walks)
	}
}

// A write answered with the object's metadata alone, in protobuf as kfsm
// asks of its status writes, leaves the world that the whole answer
// would: the object as the operator last left it, changed as the write's
// merge patch says, with the answer's metadata.
func TestAWriteAnsweredWithMetadataAloneLeavesTheObjectItPatched(t *testing.T) {
	key := apiKey{Group: "testing.kfsm.dev", Resource: "gadgets", Namespace: "ns", Name: "g"}
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
		tr := newTracker(&Env{Namespace: "ns"}, true)
		tr.statuses["gadgets"] = true
		first := answer(created)
		tr.answered(key, nil, first)
		_ = first.Body.Close()
		req, err := http.NewRequest(http.MethodPatch, "https://api/apis/testing.kfsm.dev/v1alpha1/namespaces/ns/gadgets/g/status", bytes.NewBufferString(patch))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/merge-patch+json")
		tr.write(req, "gadgets/g", 2, Write{Verb: "patch", apiKey: key, Subresource: "status"})
		resp := answer(answered)
		tr.answered(key, req, resp)
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
