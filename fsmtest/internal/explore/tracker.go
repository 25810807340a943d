package explore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Point is a place in a run where a fault may strike, with the key of the
// abstract world there: what the scenario changed so far and each object
// as the operator's last write to it left it (what World leaves out, the
// history and the status of children left out), and what happens at the
// point. Two points with one key are taken for one: a fault that struck
// at one need not strike at the other.
type Point struct {
	Seq   int
	Atoms []Atom // the faults that may strike here
	Key   uint64 // 0 in a run that is not keyed
	What  string
}

// Object names an object as the API's paths do, without the namespace,
// which is each run's own.
type Object struct {
	Group, Resource, Name string
}

// Write is a write of the operator's, about to be sent.
type Write struct {
	To          Object // as the request's path names it; a create's has no name
	Res         string // RESOURCE/NAME, as a schedule names the object, a create's too
	N           int    // the write's number among the writes to Res, from 1
	Verb        string // create, update, patch, apply or delete
	Subresource string
	What        string // as a failure names the write
}

// Tracker records, in a run of Explore, the points where a fault may
// strike and where the run's faults struck.
type Tracker struct {
	world World
	// keyed says whether the points get keys: only a run that Explore
	// extends with another fault needs them, and a key costs decoding
	// and encoding every write and every event.
	keyed bool

	mu        sync.Mutex
	ops       int               // the scenario's changes so far
	changedAt int               // the number of walks before the last of them was written
	last      map[Object]uint64 // each object as the operator's last write left it
	objects   map[Object][]byte // the same, in JSON, for a write answered with metadata alone
	statuses  map[string]bool   // the resources whose status the operator wrote
	events    map[string]int    // watch events so far, by resource
	points    []Point
	struckAt  map[Atom]int // the seq of the point where each fault struck
	jumped    bool         // the fake clock jumped

	// Watch events held back, and caches listing anew, with when the last
	// of them ended: the operator waits for them without a write, and is
	// not quiet meanwhile.
	held     int
	heldTill time.Time
}

// NewTracker returns the tracker of a run whose points get keys if
// keyed: only a run that Explore extends with another fault needs them.
func NewTracker(world World, keyed bool) *Tracker {
	return &Tracker{world: world, keyed: keyed, last: map[Object]uint64{}, objects: map[Object][]byte{}, statuses: map[string]bool{}, events: map[string]int{}, struckAt: map[Atom]int{}}
}

// Change notes a change of the scenario's, written after the first
// walks walks: a walk that the change's own event started may end before
// the write returns to the scenario, on a loaded machine.
func (tr *Tracker) Change(walks int) {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.ops++
	tr.changedAt = walks
}

// SinceChange is the number of the first walk after the scenario's last
// change.
func (tr *Tracker) SinceChange() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.changedAt
}

// add records a point and returns its seq; the caller holds tr.mu. The
// key of a write's or an action's point holds what the operator last
// wrote to each object; that of a watch event holds its object alone,
// for events reach the operator at times of their own.
func (tr *Tracker) add(atoms []Atom, what string, world bool, parts ...any) int {
	if !tr.keyed {
		return tr.record(atoms, what, 0)
	}
	h := fnv.New64a()
	fmt.Fprint(h, tr.ops)
	if !world {
		fmt.Fprint(h, parts...)
		return tr.record(atoms, what, h.Sum64())
	}
	// By kind and name: the namespace is each run's own.
	names := map[string]uint64{}
	for k, d := range tr.last {
		names[k.Group+"/"+k.Resource+"/"+k.Name] = d
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		fmt.Fprint(h, name, names[name])
	}
	fmt.Fprint(h, parts...)
	return tr.record(atoms, what, h.Sum64())
}

func (tr *Tracker) record(atoms []Atom, what string, key uint64) int {
	seq := len(tr.points) + 1
	tr.points = append(tr.points, Point{Seq: seq, Atoms: atoms, Key: key, What: what})
	return seq
}

// Write records the write w of req, about to be sent, and returns its
// seq.
func (tr *Tracker) Write(req *http.Request, w Write) int {
	if tr == nil {
		return 0
	}
	var body []byte
	if req.Body != nil && tr.keyed {
		body, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	d := tr.digest(body)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if w.Subresource == "status" {
		tr.statuses[w.To.Resource] = true
	}
	atoms := []Atom{{Kind: Crash, N: w.N, Res: w.Res}, {Kind: Fail, N: w.N, Res: w.Res}}
	if Conflictable(w.Verb) {
		atoms = append(atoms, Atom{Kind: Conflict, N: w.N, Res: w.Res})
	}
	return tr.add(atoms, w.What, true, "write", w.Verb, w.To.Group, w.To.Resource, w.To.Name, w.Subresource, d)
}

// Conflictable reports whether a write of this verb can lose a race: it
// changes an object that exists.
func Conflictable(verb string) bool {
	return verb == "update" || verb == "patch" || verb == "apply"
}

// Answered notes the API server's answer to req, a write of key: when it
// took the write, the object it answered with is what the operator last
// made of that object, whatever the verb (a create and an apply of the
// same object leave the same world). The status of a resource whose
// status the operator never wrote is left out, as for watch events.
func (tr *Tracker) Answered(key Object, req *http.Request, resp *http.Response) {
	if tr == nil || !tr.keyed || resp == nil || resp.StatusCode >= 300 {
		return
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return
	}
	object, whole := decodeAnswer(body)
	if key.Name == "" { // a create: the name is in the object
		var meta struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		_ = json.Unmarshal(object, &meta)
		key.Name = meta.Metadata.Name
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !whole {
		object = tr.overlay(key, object, req)
	}
	tr.objects[key] = object
	if !tr.statuses[key.Resource] {
		object = withoutStatus(object)
	}
	tr.last[key] = tr.digest(object)
}

// decodeAnswer is a write's answer as JSON, decoded from protobuf if the
// client asked for that; whole is false for an answer of the object's
// metadata alone, which a client may ask of any write.
func decodeAnswer(body []byte) (object []byte, whole bool) {
	var kind struct{ Kind string }
	if json.Unmarshal(body, &kind) == nil {
		return body, kind.Kind != "PartialObjectMetadata"
	}
	obj := Decode(body)
	if obj == nil {
		return body, true
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return body, true
	}
	object, err = json.Marshal(fields)
	if err != nil {
		return body, true
	}
	_, partial := obj.(*metav1.PartialObjectMetadata)
	return object, !partial
}

// overlay is the object that a write answered with its metadata alone
// left: the object as the operator's last write left it, with what req
// changed (a merge patch's fields, an update's object) and the answer's
// metadata. A write that says what it changed in other terms (a JSON
// patch, an apply) is taken for a world of its own. The caller holds
// tr.mu.
func (tr *Tracker) overlay(key Object, answer []byte, req *http.Request) []byte {
	object := tr.objects[key]
	if object == nil {
		object = []byte("{}")
	}
	var (
		sent   []byte
		fields map[string]any
	)
	if req == nil {
		req = &http.Request{}
	}
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			sent, _ = io.ReadAll(b)
		}
	}
	switch {
	case strings.HasPrefix(req.Header.Get("Content-Type"), string(types.MergePatchType)):
		if patched, err := jsonpatch.MergePatch(object, sent); err == nil {
			object = patched
		}
		_ = json.Unmarshal(object, &fields)
	case req.Method == http.MethodPut:
		if whole, ok := decodeAnswer(sent); ok {
			_ = json.Unmarshal(whole, &fields)
		}
	}
	if fields == nil {
		fields = map[string]any{"write": tr.digest(sent)}
	}
	var meta struct {
		Metadata any `json:"metadata"`
	}
	_ = json.Unmarshal(answer, &meta)
	fields["metadata"] = meta.Metadata
	out, err := json.Marshal(fields)
	if err != nil {
		return answer
	}
	return out
}

// Event records a watch event of resource res and returns its number
// and seq. The status of an object of a resource whose status the
// operator never wrote is left out of the event's key: what other
// controllers report there (a Deployment's replicas as they come up)
// moves at a pace of its own, and one event of each spec is enough to
// strike.
func (tr *Tracker) Event(res, kind string, object []byte) (int, int) {
	if tr == nil {
		return 0, 0
	}
	var meta struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	_ = json.Unmarshal(object, &meta)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.keyed && !tr.statuses[res] {
		object = withoutStatus(object)
	}
	d := tr.digest(object)
	tr.events[res]++
	n := tr.events[res]
	atoms := []Atom{{Kind: Delay, N: n, Res: res}, {Kind: Relist, N: n, Res: res}}
	return n, tr.add(atoms, fmt.Sprintf("%s %s %s", kind, res, meta.Metadata.Name), false, "event", res, kind, meta.Metadata.Name, d)
}

// Action records the start or end of an action and returns its seq.
func (tr *Tracker) Action(a Atom, obj types.NamespacedName, name string) int {
	if tr == nil {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.add([]Atom{a}, fmt.Sprintf("%s of %s", name, obj.Name), true, a.Kind, name, obj.Name)
}

// Call records call n to an outside system, about to make its effect,
// and returns its seq. A read, which has no effect, may only fail.
func (tr *Tracker) Call(n int, system, op string, read bool) int {
	if tr == nil {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	atoms := []Atom{{Kind: CallFail, N: n}}
	if !read {
		atoms = append(atoms, Atom{Kind: CallLost, N: n}, Atom{Kind: CallTimeout, N: n})
	}
	return tr.add(atoms, system+" "+op, true, "call", system, op)
}

// Drift records the point before the scenario's change n, what, where
// the drifts named may strike, and returns its seq.
func (tr *Tracker) Drift(n int, names []string, what string) int {
	if tr == nil {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	atoms := make([]Atom, len(names))
	for i, name := range names {
		atoms[i] = Atom{Kind: Drift, N: n, Res: name}
	}
	return tr.add(atoms, what, true, "drift", n)
}

// Struck notes that fault a struck at the point seq.
func (tr *Tracker) Struck(a Atom, seq int) {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if _, ok := tr.struckAt[a]; !ok {
		tr.struckAt[a] = seq
	}
}

// AnyStruck reports whether a fault of the run struck so far.
func (tr *Tracker) AnyStruck() bool {
	if tr == nil {
		return false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.struckAt) > 0
}

// Await records, once the scenario's step n, an Await, held and the
// operator was quiet with a timer of its waiting on the fake clock, a
// point where the clock may jump; it returns the point's seq.
func (tr *Tracker) Await(n int, what string) int {
	if tr == nil {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.add([]Atom{{Kind: Clock, N: n}}, what, true, "await", n)
}

// Jumped notes that the fake clock jumped past the operator's next
// timer, as when the process was paused for a while or its node's clock
// was set forward.
func (tr *Tracker) Jumped() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.jumped = true
}

// ClockJumped reports whether the fake clock jumped in the run.
func (tr *Tracker) ClockJumped() bool {
	if tr == nil {
		return false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.jumped
}

// Result returns the run's points and where its faults struck.
func (tr *Tracker) Result() ([]Point, map[Atom]int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.points), maps.Clone(tr.struckAt)
}

// digest is the hash of a request's or an event's object, with what
// differs between two correct runs left out.
func (tr *Tracker) digest(doc []byte) uint64 {
	if !tr.keyed {
		return 0
	}
	h := fnv.New64a()
	var v any
	if json.Unmarshal(doc, &v) != nil {
		_, _ = h.Write(doc)
		return h.Sum64()
	}
	// A JSON patch's operations name the fields they set by path.
	if ops, ok := v.([]any); ok {
		for _, op := range ops {
			if op, ok := op.(map[string]any); ok {
				if p, ok := op["path"].(string); ok && variable[p[strings.LastIndex(p, "/")+1:]] {
					op["value"] = "<variable>"
				}
			}
		}
	}
	if m, ok := v.(map[string]any); ok {
		if meta, ok := m["metadata"].(map[string]any); ok {
			delete(meta, "managedFields")
			delete(meta, "generation")
		}
		if status, ok := m["status"].(map[string]any); ok {
			m["status"] = WithoutPath(status) // an action's key too, made of the object's UID
		}
	}
	out, _ := json.Marshal(withoutWords(tr.world.Normalize(v)))
	// UIDs hide in strings too: a managed field's key names an owner
	// reference by its UID.
	_, _ = h.Write(uuid.ReplaceAll(out, []byte("<uid>")))
	return h.Sum64()
}

// Hold notes a watch event held back, or a cache listing anew.
func (tr *Tracker) Hold() {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.held++
}

// Release notes the end of what hold noted.
func (tr *Tracker) Release() {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.held--
	tr.heldTill = time.Now()
}

// IdleFor reports how long nothing was held back.
func (tr *Tracker) IdleFor(now time.Time) time.Duration {
	if tr == nil {
		return time.Duration(1<<63 - 1)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.held > 0 {
		return 0
	}
	return now.Sub(tr.heldTill)
}

// answers decodes the API server's answers in protobuf: the built-in
// kinds, and the metadata alone of any kind, which kfsm asks of its
// status writes.
var answers = func() runtime.Decoder {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(metav1.AddMetaToScheme(s))
	return serializer.NewCodecFactory(s).UniversalDeserializer()
}()

// Decode decodes an answer of the API server, or returns nil.
func Decode(body []byte) runtime.Object {
	obj, _, err := answers.Decode(body, nil, nil)
	if err != nil {
		return nil
	}
	return obj
}
