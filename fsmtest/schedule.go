package fsmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// atom is one fault of a schedule that Explore runs, at a point of the
// run: a write, a watch event, the start or end of an action, a call to
// an outside system, or a change of the scenario's, each counted from 1
// in the run.
type atom struct {
	Kind atomKind
	N    int
	Res  string // the object of a write (RESOURCE/NAME), the resource of a watch event, or the name of a drift
}

type atomKind string

// The faults that Explore combines.
const (
	atomCrash       atomKind = "crash"        // the process dies once write N to the object Res is answered
	atomFail        atomKind = "fail"         // write N to Res fails before it reaches the server
	atomConflict    atomKind = "conflict"     // write N to Res is answered 409 Conflict
	atomClock       atomKind = "clock"        // once the scenario's step N, an Await, held, the fake clock jumps past the operator's next timer
	atomDelay       atomKind = "delay"        // watch event N of Res reaches the operator late, and those after it on its watch
	atomRelist      atomKind = "relist"       // the watch of Res breaks at its event N, which is lost; the cache lists anew
	atomActionStart atomKind = "action-start" // the process dies as the work of action N starts
	atomActionEnd   atomKind = "action-end"   // the process dies as the work of action N returns, before its outcome is written
	atomCallFail    atomKind = "call-fail"    // call N to an outside system fails before its effect
	atomCallLost    atomKind = "call-lost"    // call N makes its effect, and its answer is lost
	atomCallTimeout atomKind = "call-timeout" // call N makes its effect, and its caller times out
	atomDrift       atomKind = "drift"        // an outside system makes its drift Res, behind the operator, just before the scenario's change N
	atomLag         atomKind = "lag"          // every watch event reaches the operator late
	atomBurst       atomKind = "burst"        // the operator starts once the scenario made its last change but one
)

// faultKind is what fsmtest knows of a kind of atom that strikes at a
// numbered point of the run: the one vocabulary of those faults.
type faultKind struct {
	// class is the class of Faults the kind belongs to; none for the
	// kinds that Explore alone strikes.
	class Fault
	// what says what the fault did, with the point's number and what
	// happened there; a drift's name comes third.
	what string
	// named: the atom names a resource or a drift, as kind:NAME:N.
	named bool
}

// faultKinds is the vocabulary of faults at points of the run. A new
// kind is added here once, and Explore strikes it at every point of a
// run that lists it (Faults too, if it has a class).
var faultKinds = map[atomKind]faultKind{
	atomCrash:       {class: Crash, what: "crash after the object's write %d (%s)", named: true},
	atomFail:        {class: FailWrite, what: "the object's write %d (%s) failed before reaching the server", named: true},
	atomConflict:    {class: Conflicts, what: "the object's write %d (%s) answered 409 Conflict", named: true},
	atomClock:       {what: "the fake clock jumped past the operator's next timer once step %d (%s) held"},
	atomDelay:       {what: "watch event %d (%s) and those after it late", named: true},
	atomRelist:      {what: "watch broken at event %d (%s), which was lost, and the cache listed anew", named: true},
	atomActionStart: {class: CrashInAction, what: "crash as the work of action %d (%s) starts"},
	atomActionEnd:   {class: CrashInAction, what: "crash as the work of action %d (%s) returns, before its outcome is written"},
	atomCallFail:    {class: OutsideFailures, what: "call %d (%s) failed before its effect"},
	atomCallLost:    {class: OutsideFailures, what: "call %d (%s) made its effect, and its answer was lost"},
	atomCallTimeout: {class: OutsideFailures, what: "call %d (%s) made its effect, and its caller timed out"},
	atomDrift:       {class: Drift, what: "before the scenario's change %d (%s), an outside system made its drift %s behind the operator", named: true},
}

// class is the class of Faults that k belongs to.
func (k atomKind) class() Fault {
	switch k {
	case atomLag:
		return StaleReads
	case atomBurst:
		return Bursts
	}
	return faultKinds[k].class
}

func (a atom) String() string {
	switch {
	case a.Kind == atomLag || a.Kind == atomBurst:
		return string(a.Kind)
	case a.Res != "":
		return fmt.Sprintf("%s:%s:%d", a.Kind, a.Res, a.N)
	}
	return fmt.Sprintf("%s:%d", a.Kind, a.N)
}

// describe says what a does, at the point of the run it struck, with
// every watch event lag late under a lag.
func (a atom) describe(at string, lag time.Duration) string {
	switch a.Kind {
	case atomLag:
		return fmt.Sprintf("every watch event %v late", lag)
	case atomBurst:
		return "the operator stopped until the scenario's last change before deleting: a burst of changes seen as one"
	}
	if at == "" {
		at = "not reached"
	}
	if a.Kind == atomDrift {
		return fmt.Sprintf(faultKinds[a.Kind].what, a.N, at, a.Res)
	}
	return fmt.Sprintf(faultKinds[a.Kind].what, a.N, at)
}

// schedule is a set of faults, in the order they strike.
type schedule []atom

func (s schedule) String() string {
	parts := make([]string, len(s))
	for i, a := range s {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",")
}

// parseSchedule reads a schedule as schedule.String writes it, for
// -kfsm.explore.
func parseSchedule(text string) (schedule, error) {
	var s schedule
	for part := range strings.SplitSeq(text, ",") {
		fields := strings.Split(strings.TrimSpace(part), ":")
		a := atom{Kind: atomKind(fields[0])}
		k, known := faultKinds[a.Kind]
		var err error
		switch {
		case (a.Kind == atomLag || a.Kind == atomBurst) && len(fields) == 1:
		case known && k.named && len(fields) == 3 && fields[1] != "":
			a.Res = fields[1]
			a.N, err = strconv.Atoi(fields[2])
		case known && !k.named && len(fields) == 2:
			a.N, err = strconv.Atoi(fields[1])
		default:
			return nil, fmt.Errorf("fsmtest: fault %q: want crash:RESOURCE/NAME:N, fail:RESOURCE/NAME:N, conflict:RESOURCE/NAME:N, clock:N, delay:RESOURCE:N, relist:RESOURCE:N, action-start:N, action-end:N, call-fail:N, call-lost:N, call-timeout:N, drift:NAME:N, lag or burst", part)
		}
		if err != nil || (len(fields) > 1 && a.N < 1) {
			return nil, fmt.Errorf("fsmtest: fault %q: the number must be a count from 1", part)
		}
		s = append(s, a)
	}
	return s, nil
}

// point is a place in a run where a fault may strike, with the key of the
// abstract world there: what the scenario changed so far and each object
// as the operator's last write to it left it (times, UIDs, versions, the
// history and the status of children left out), and what happens at the
// point. Two points with one
// key are taken for one: a fault that struck at one need not strike at
// the other.
type point struct {
	seq   int
	atoms []atom
	key   uint64
	what  string
}

// tracker records, in a run of Explore, the points where a fault may
// strike and where the run's faults struck.
type tracker struct {
	e *Env
	// keyed says whether the points get keys: only a run that Explore
	// extends with another fault needs them, and a key costs decoding
	// and encoding every write and every event.
	keyed bool

	mu        sync.Mutex
	ops       int               // the scenario's changes so far
	changedAt int               // the number of walks before the last of them was written
	last      map[apiKey]uint64 // each object as the operator's last write left it
	objects   map[apiKey][]byte // the same, in JSON, for a write answered with metadata alone
	statuses  map[string]bool   // the resources whose status the operator wrote
	events    map[string]int    // watch events so far, by resource
	points    []point
	struckAt  map[atom]int // the seq of the point where each fault struck
	jumped    bool         // the fake clock jumped

	// Watch events held back, and caches listing anew, with when the last
	// of them ended: the operator waits for them without a write, and is
	// not quiet meanwhile.
	held     int
	heldTill time.Time
}

func newTracker(e *Env, keyed bool) *tracker {
	return &tracker{e: e, keyed: keyed, last: map[apiKey]uint64{}, objects: map[apiKey][]byte{}, statuses: map[string]bool{}, events: map[string]int{}, struckAt: map[atom]int{}}
}

// change notes a change of the scenario's, written after the first
// walks walks: a walk that the change's own event started may end before
// the write returns to the scenario, on a loaded machine.
func (tr *tracker) change(walks int) {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.ops++
	tr.changedAt = walks
}

// sinceChange is the number of the first walk after the scenario's last
// change.
func (tr *tracker) sinceChange() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.changedAt
}

// add records a point and returns its seq; the caller holds tr.mu. The
// key of a write's or an action's point holds what the operator last
// wrote to each object; that of a watch event holds its object alone,
// for events reach the operator at times of their own.
func (tr *tracker) add(atoms []atom, what string, world bool, parts ...any) int {
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

func (tr *tracker) record(atoms []atom, what string, key uint64) int {
	seq := len(tr.points) + 1
	tr.points = append(tr.points, point{seq: seq, atoms: atoms, key: key, what: what})
	return seq
}

// write records write k to object, about to be sent, and returns its
// seq.
func (tr *tracker) write(req *http.Request, object string, k int, w Write) int {
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
		tr.statuses[w.Resource] = true
	}
	atoms := []atom{{Kind: atomCrash, N: k, Res: object}, {Kind: atomFail, N: k, Res: object}}
	if conflictable(w.Verb) {
		atoms = append(atoms, atom{Kind: atomConflict, N: k, Res: object})
	}

	return tr.add(atoms, w.String(), true, "write", w.Verb, w.Group, w.Resource, w.Name, w.Subresource, d)
}

// answered notes the API server's answer to req, a write of key: when it
// took the write, the object it answered with is what the operator last
// made of that object, whatever the verb (a create and an apply of the
// same object leave the same world). The status of a resource whose
// status the operator never wrote is left out, as for watch events.
func (tr *tracker) answered(key apiKey, req *http.Request, resp *http.Response) {
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
	obj := runtimeDecode(body)
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
func (tr *tracker) overlay(key apiKey, answer []byte, req *http.Request) []byte {
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

// event records a watch event of resource res and returns its number
// and seq. The status of an object of a resource whose status the
// operator never wrote is left out of the event's key: what other
// controllers report there (a Deployment's replicas as they come up)
// moves at a pace of its own, and one event of each spec is enough to
// strike.
func (tr *tracker) event(res, kind string, object []byte) (int, int) {
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
	atoms := []atom{{Kind: atomDelay, N: n, Res: res}, {Kind: atomRelist, N: n, Res: res}}
	return n, tr.add(atoms, fmt.Sprintf("%s %s %s", kind, res, meta.Metadata.Name), false, "event", res, kind, meta.Metadata.Name, d)
}

// action records the start or end of an action and returns its seq.
func (tr *tracker) action(a atom, obj types.NamespacedName, name string) int {
	if tr == nil {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.add([]atom{a}, fmt.Sprintf("%s of %s", name, obj.Name), true, a.Kind, name, obj.Name)
}

// call records call n to an outside system, about to make its effect,
// and returns its seq. A read, which has no effect, may only fail.
func (tr *tracker) call(n int, system, op string, read bool) int {
	if tr == nil {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	atoms := []atom{{Kind: atomCallFail, N: n}}
	if !read {
		atoms = append(atoms, atom{Kind: atomCallLost, N: n}, atom{Kind: atomCallTimeout, N: n})
	}
	return tr.add(atoms, system+" "+op, true, "call", system, op)
}

// drift records the point before the scenario's change n, what, where
// the drifts named may strike, and returns its seq.
func (tr *tracker) drift(n int, names []string, what string) int {
	if tr == nil {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	atoms := make([]atom, len(names))
	for i, name := range names {
		atoms[i] = atom{Kind: atomDrift, N: n, Res: name}
	}
	return tr.add(atoms, what, true, "drift", n)
}

// struck notes that fault a struck at the point seq.
func (tr *tracker) struck(a atom, seq int) {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if _, ok := tr.struckAt[a]; !ok {
		tr.struckAt[a] = seq
	}
}

// awaited records, once the scenario's step n, an Await, held and the
// operator was quiet, a point where the fake clock may jump, if the
// operator waits on it; it returns the point's seq, or 0.
func (tr *tracker) awaited(n int, what string) int {
	if tr == nil || !tr.e.Clock.HasWaiters() || tr.e.walks.nextTimer(tr.e.Clock.Now(), false).IsZero() {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.add([]atom{{Kind: atomClock, N: n}}, what, true, "await", n)
}

// jump moves the fake clock past the operator's next timer, so that the
// timeouts and waits due by then fire at once, as when the process was
// paused for a while or its node's clock was set forward.
func (tr *tracker) jump() {
	if next := tr.e.walks.nextTimer(tr.e.Clock.Now(), false); !next.IsZero() {
		tr.e.Clock.SetTime(next.Add(time.Second))
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.jumped = true
}

// clockJumped reports whether the fake clock jumped in the run.
func (tr *tracker) clockJumped() bool {
	if tr == nil {
		return false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.jumped
}

// result returns the run's points and where its faults struck.
func (tr *tracker) result() ([]point, map[atom]int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.points), maps.Clone(tr.struckAt)
}

// digest is the hash of a request's or an event's object, with what
// differs between two correct runs left out.
func (tr *tracker) digest(doc []byte) uint64 {
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
			m["status"] = withoutPath(status) // an action's key too, made of the object's UID
		}
	}
	out, _ := json.Marshal(withoutWords(tr.e.normalize(v)))
	// UIDs hide in strings too: a managed field's key names an owner
	// reference by its UID.
	_, _ = h.Write(uuid.ReplaceAll(out, []byte("<uid>")))
	return h.Sum64()
}

var uuid = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// withoutStatus returns an object's JSON without its status.
func withoutStatus(object []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(object, &m) != nil {
		return object
	}
	delete(m, "status")
	out, err := json.Marshal(m)
	if err != nil {
		return object
	}
	return out
}

// hold notes a watch event held back, or a cache listing anew.
func (tr *tracker) hold() {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.held++
}

// release notes the end of what hold noted.
func (tr *tracker) release() {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.held--
	tr.heldTill = time.Now()
}

// idleFor reports how long nothing was held back.
func (tr *tracker) idleFor(now time.Time) time.Duration {
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

// withoutWords leaves out of v the messages and errors that say in words
// what its reasons and states say in short: a failure's text names the
// write that failed and the server's address, which differ between two
// runs that are in the same state.
func withoutWords(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if k != "message" && k != "error" {
				out[k] = withoutWords(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = withoutWords(x)
		}
		return out
	}
	return v
}
