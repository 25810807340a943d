package fsmtest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest/internal/explore"
)

type httpRoundTripper = http.RoundTripper

// apiKey names an object as the API's paths do.
type apiKey struct {
	Group, Resource, Namespace, Name string
}

// object is k as the tracker of a run names it: the namespace is the
// run's own.
func (k apiKey) object() explore.Object {
	return explore.Object{Group: k.Group, Resource: k.Resource, Name: k.Name}
}

// Write is one write of the operator, as the API server answered it.
type Write struct {
	Verb string // create, update, patch, apply, delete
	apiKey
	Subresource     string
	ResourceVersion string // of the answer, when it carried one
}

func (w Write) String() string {
	res := w.Resource
	if w.Group != "" {
		res += "." + w.Group
	}
	s := fmt.Sprintf("%s %s %s", w.Verb, res, w.Name)
	if w.Subresource != "" {
		s += " " + w.Subresource
	}
	return s
}

// Writes counts an object's writes by verb; Status counts the writes of
// its status subresource, whatever their verb.
type Writes struct {
	Create, Update, Patch, Apply, Delete, Status int
}

// Total is the number of writes.
func (w Writes) Total() int { return w.Create + w.Update + w.Patch + w.Apply + w.Delete + w.Status }

// apiLog records the operator's writes, in the order the API server
// answered them.
type apiLog struct {
	mu      sync.Mutex
	writes  []Write
	lastRV  map[apiKey]int64 // the newest version the operator wrote
	reads   map[apiKey]int   // gets by name, past the cache
	lastAt  time.Time        // of the last write or request in flight
	flights int

	forbidden []string // requests refused with 403 Forbidden, the first few
}

func newAPILog() *apiLog { return &apiLog{lastRV: map[apiKey]int64{}, reads: map[apiKey]int{}} }

func (l *apiLog) read(k apiKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads[k]++
}

func (l *apiLog) readsOf(k apiKey) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads[k]
}

func (l *apiLog) all() []Write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Write(nil), l.writes...)
}

func (l *apiLog) written(k apiKey) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastRV[k]
}

// quietFor reports how long no write has been made or been in flight.
func (l *apiLog) quietFor(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.flights > 0 {
		return 0
	}
	return now.Sub(l.lastAt)
}

// lastWrite is when the last write was answered, and false while one is
// in flight.
func (l *apiLog) lastWrite() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastAt, l.flights == 0
}

// life is one run of an operator process: its faults, and whether it has
// crashed. A crashed process reaches the API server no more.
type life struct {
	faults  *explore.Faults
	crashed atomic.Bool
	onCrash func()
}

// crash ends the process: it reaches the API server no more, and a new
// one takes over.
func (l *life) crash() {
	if l.crashed.CompareAndSwap(false, true) {
		go l.onCrash()
	}
}

// action crashes the process at the action start or end that its faults
// name. It runs before the work starts, or once it returned and before
// the object is queued to record the outcome.
func (l *life) action(obj types.NamespacedName, name string, a fsm.Action) {
	f := l.faults
	if f == nil {
		return
	}
	if f.Action(a.State != fsm.ActionPending, obj, name) {
		l.crash()
	}
}

// createdName is the name of the object that a create's JSON body makes,
// or the prefix of the name that the API server generates for it; empty
// for a body of protobuf.
func createdName(req *http.Request) string {
	if req.GetBody == nil {
		return ""
	}
	body, err := req.GetBody()
	if err != nil {
		return ""
	}
	defer func() { _ = body.Close() }()
	var obj struct {
		Metadata struct{ Name, GenerateName string } `json:"metadata"`
	}
	_ = json.NewDecoder(body).Decode(&obj)
	return cmp.Or(obj.Metadata.Name, obj.Metadata.GenerateName)
}

var errCrashed = errors.New("fsmtest: the operator process crashed here (injected)")

// transport is the operator's way to the API server: it counts writes
// and injects faults.
type transport struct {
	next http.RoundTripper
	api  *apiLog
	life *life
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.roundTrip(req)
	if err == nil && resp.StatusCode == http.StatusForbidden {
		t.api.forbid(req.Method+" "+req.URL.Path, refusal(resp))
	}
	return resp, err
}

func (t *transport) roundTrip(req *http.Request) (*http.Response, error) {
	if t.life != nil && t.life.crashed.Load() {
		return nil, errCrashed
	}
	var f *explore.Faults
	if t.life != nil {
		f = t.life.faults
	}
	verb := writeVerb(req)
	key, sub, ok := parsePath(req.URL.Path)
	if verb == "" && ok && key.Name != "" && req.Method == http.MethodGet {
		t.api.read(key)
	}
	// Events, the graph a machine publishes on its CRD when it starts,
	// the question a webhook asks the API server about who the operator
	// is, and the Leases of replicas under Replicas, renewed on their own
	// clock, are not the machine's writes to objects: they are neither
	// counted nor faulted.
	if verb == "" || !ok || key.Resource == "events" || key.Resource == "customresourcedefinitions" || key.Resource == "selfsubjectreviews" ||
		key.Resource == "leases" && key.Group == "coordination.k8s.io" {
		return f.Watch(t.next, req, key.Resource)
	}
	if f == nil {
		return t.send(req, Write{Verb: verb, apiKey: key, Subresource: sub})
	}
	name := key.Name
	if name == "" && verb == "create" {
		name = createdName(req)
	}
	object := key.Resource + "/" + name
	k := f.Write(object)
	w := Write{Verb: verb, apiKey: key, Subresource: sub}
	seq := f.Trace().Write(req, explore.Write{To: key.object(), Res: object, N: k, Verb: verb, Subresource: sub, What: w.String()})
	switch {
	case f.Strikes(explore.Atom{Kind: explore.Fail, Res: object, N: k}, seq):
		return nil, fmt.Errorf("fsmtest: write %d to %s (%s) failed before reaching the API server (injected)", k, object, verb)
	case explore.Conflictable(verb) && f.Strikes(explore.Atom{Kind: explore.Conflict, Res: object, N: k}, seq):
		return conflict(req, key), nil
	}
	resp, err := t.send(req, w)
	if err == nil {
		f.Trace().Answered(key.object(), req, resp)
	}
	if err == nil && f.Strikes(explore.Atom{Kind: explore.Crash, Res: object, N: k}, seq) {
		// The write reached the server; the process that made it never
		// learns so, and does nothing after it.
		_ = resp.Body.Close()
		t.life.crash()
		return nil, errCrashed
	}
	return resp, err
}

// send makes write w, and logs it once the API server answered.
func (t *transport) send(req *http.Request, w Write) (*http.Response, error) {
	t.api.begin()
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode < 300 {
		var deleted bool
		w, deleted = t.read(resp, w)
		t.api.done(&w, deleted)
	} else {
		t.api.done(nil, false)
	}
	return resp, err
}

// read takes the name and resourceVersion of the object in a write's
// answer, and puts the answer back for the client. It reports whether the
// write took the last finalizer off a deleted object, which the API
// server then deleted: it answers with the object at the version before,
// and the deletion is a later one.
func (t *transport) read(resp *http.Response, w Write) (Write, bool) {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return w, false
	}
	var answer struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name              string   `json:"name"`
			ResourceVersion   string   `json:"resourceVersion"`
			DeletionTimestamp string   `json:"deletionTimestamp"`
			Finalizers        []string `json:"finalizers"`
		} `json:"metadata"`
	}
	if json.Unmarshal(body, &answer) != nil {
		// Protobuf, which clients may ask for built-in kinds.
		obj, ok := explore.Decode(body).(metav1.Object)
		if !ok {
			return w, false
		}
		answer.Metadata.Name, answer.Metadata.ResourceVersion = obj.GetName(), obj.GetResourceVersion()
		if !obj.GetDeletionTimestamp().IsZero() {
			answer.Metadata.DeletionTimestamp, answer.Metadata.Finalizers = "deleted", obj.GetFinalizers()
		}
	}
	if answer.Kind == "Status" {
		return w, false
	}
	if w.Name == "" {
		w.Name = answer.Metadata.Name
	}
	w.ResourceVersion = answer.Metadata.ResourceVersion
	return w, answer.Metadata.DeletionTimestamp != "" && len(answer.Metadata.Finalizers) == 0 && w.Verb != "delete"
}

// refusal reads the API server's message out of a refused request's
// answer, and puts the answer back for the client.
func refusal(resp *http.Response) string {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return resp.Status
	}
	// JSON or protobuf, as the request asked.
	status, ok := explore.Decode(body).(*metav1.Status)
	if !ok || status.Message == "" {
		return resp.Status
	}
	return status.Message
}

// forbid notes a request that the API server refused for want of a
// permission: the few first, each once, for the failure message of a
// test whose operator runs under a role.
func (l *apiLog) forbid(request, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := request + ": " + message
	if len(l.forbidden) < 5 && !slices.Contains(l.forbidden, line) {
		l.forbidden = append(l.forbidden, line)
	}
}

// refused says which of the operator's requests the API server refused
// for want of a permission, or "" if none was.
func (l *apiLog) refused() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.forbidden) == 0 {
		return ""
	}
	return "\nthe API server refused the operator (does its role lack a permission?):\n\t" + strings.Join(l.forbidden, "\n\t")
}

func (l *apiLog) begin() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flights++
}

// done ends a request in flight, and logs w, the write it made, if one;
// deleted says that the write deleted the object (see read).
func (l *apiLog) done(w *Write, deleted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flights--
	l.lastAt = time.Now()
	if w == nil {
		return
	}
	l.writes = append(l.writes, *w)
	if rv, err := strconv.ParseInt(w.ResourceVersion, 10, 64); err == nil {
		if deleted {
			rv++ // no version of the object is as new
		}
		l.lastRV[w.apiKey] = max(l.lastRV[w.apiKey], rv)
	}
}

// writeVerb names the write that req makes, or "" for a read.
func writeVerb(req *http.Request) string {
	switch req.Method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodDelete:
		return "delete"
	case http.MethodPatch:
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			return "apply"
		}
		return "patch"
	}
	return ""
}

// parsePath reads /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]] and
// /apis/GROUP/VERSION/... .
func parsePath(p string) (apiKey, string, bool) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	var k apiKey
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		k.Group, parts = parts[1], parts[3:]
	default:
		return k, "", false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		k.Namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 {
		return k, "", false
	}
	k.Resource = parts[0]
	if len(parts) > 1 {
		k.Name = parts[1]
	}
	sub := ""
	if len(parts) > 2 {
		sub = parts[2]
	}
	return k, sub, true
}

// conflict is the API server's answer to a write that lost a race.
func conflict(req *http.Request, k apiKey) *http.Response {
	body, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": http.StatusConflict,
		"message": fmt.Sprintf("Operation cannot be fulfilled on %s %q: the object has been modified (conflict injected by fsmtest)", k.Resource, k.Name),
		"details": map[string]any{"name": k.Name, "kind": k.Resource},
	})
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusConflict, Status: "409 Conflict", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req,
	}
}
