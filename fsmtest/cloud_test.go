package fsmtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// The states of the VM operator.
const (
	Provisioning fsm.State = "Provisioning"
	Running      fsm.State = "Running"
	Resizing     fsm.State = "Resizing"
	Deleting     fsm.State = "Deleting"
	Deleted      fsm.State = "Deleted"
)

// cloudAPI is a cloud's API for virtual machines over HTTP, as a test
// fakes it: a create with a client token it has seen returns the VM made
// under it, as AWS's client tokens do, and any other create makes, and
// bills, a new VM. Each effect goes through Outside.Call, where Faults
// and Explore strike. On its own, the API also loses the answer of the
// first create, resize and delete of each VM after making it: a 500 for
// creates and deletes, and no answer until the caller times out for
// resizes.
type cloudAPI struct {
	srv    *httptest.Server
	system *fsmtest.Outside

	mu     sync.Mutex
	made   int               // VMs made
	vms    map[string]*vm    // by id
	tokens map[string]string // id by client token
	billed map[string]int    // VMs made, by the name they were made for
	lost   map[string]bool   // "op id" of the answers lost already
}

type vm struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Size int    `json:"size"`
}

// clouds holds each run's cloud, by its namespace: the processes of a
// run share it, as they would the real one.
var clouds sync.Map

func cloudOf(e *fsmtest.Env) *cloudAPI {
	if c, ok := clouds.Load(e.Namespace); ok {
		return c.(*cloudAPI)
	}
	c := &cloudAPI{system: e.Outside("cloud"), vms: map[string]*vm{}, tokens: map[string]string{}, billed: map[string]int{}, lost: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /vms", c.create)
	mux.HandleFunc("GET /vms", c.find)
	mux.HandleFunc("PUT /vms/{id}/size", c.resize)
	mux.HandleFunc("DELETE /vms/{id}", c.remove)
	c.srv = httptest.NewServer(mux)
	if prev, loaded := clouds.LoadOrStore(e.Namespace, c); loaded {
		c.srv.Close()
		return prev.(*cloudAPI)
	}
	e.T.Cleanup(func() {
		c.srv.CloseClientConnections()
		c.srv.Close()
		clouds.Delete(e.Namespace)
	})
	return c
}

// call makes an effect through the outside system's faults and answers
// as the cloud would: the effect's answer, or an error after it.
func (c *cloudAPI) call(w http.ResponseWriter, req *http.Request, op string, effect func() (any, error)) {
	var answer any
	err := c.system.Call(op, func() error {
		var err error
		answer, err = effect()
		return err
	})
	switch {
	case errors.Is(err, fsmtest.ErrUnavailable):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case errors.Is(err, fsmtest.ErrAnswerLost):
		http.Error(w, err.Error(), http.StatusInternalServerError)
	case errors.Is(err, fsmtest.ErrTimedOut):
		panic(http.ErrAbortHandler) // the connection closes without an answer
	case errors.Is(err, errNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		c.answerOrLose(w, req, op, answer)
	}
}

var errNotFound = errors.New("no such VM")

// answerOrLose answers, unless it is the first answer of op for this VM:
// that one is lost after the effect.
func (c *cloudAPI) answerOrLose(w http.ResponseWriter, req *http.Request, op string, answer any) {
	id := req.PathValue("id")
	if v, ok := answer.(*vm); ok && id == "" {
		id = v.ID
	}
	c.mu.Lock()
	first := !c.lost[op+" "+id]
	c.lost[op+" "+id] = true
	c.mu.Unlock()
	switch {
	case first && op == "resize":
		<-req.Context().Done() // no answer until the caller gives up
		return
	case first:
		http.Error(w, "the VM was "+op+"d, and the answer lost", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

func (c *cloudAPI) create(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	name, token := q.Get("name"), q.Get("token")
	size, err := strconv.Atoi(q.Get("size"))
	if name == "" || err != nil {
		http.Error(w, "want a name and a size", http.StatusBadRequest)
		return
	}
	c.call(w, req, "create", func() (any, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if id, ok := c.tokens[token]; ok && token != "" {
			return c.vms[id], nil
		}
		c.made++
		v := &vm{ID: fmt.Sprintf("i-%04d", c.made), Name: name, Size: size}
		c.vms[v.ID] = v
		c.billed[name]++
		if token != "" {
			c.tokens[token] = v.ID
		}
		return v, nil
	})
}

func (c *cloudAPI) find(w http.ResponseWriter, req *http.Request) {
	c.mu.Lock()
	v := c.vms[c.tokens[req.URL.Query().Get("token")]]
	c.mu.Unlock()
	if v == nil {
		http.Error(w, errNotFound.Error(), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (c *cloudAPI) resize(w http.ResponseWriter, req *http.Request) {
	size, err := strconv.Atoi(req.URL.Query().Get("size"))
	if err != nil {
		http.Error(w, "want a size", http.StatusBadRequest)
		return
	}
	c.call(w, req, "resize", func() (any, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		v := c.vms[req.PathValue("id")]
		if v == nil {
			return nil, errNotFound
		}
		v.Size = size
		return v, nil
	})
}

// remove deletes a VM; deleting one that is gone is no error, so that a
// delete may be sent again.
func (c *cloudAPI) remove(w http.ResponseWriter, req *http.Request) {
	c.call(w, req, "delete", func() (any, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.vms, req.PathValue("id"))
		return struct{}{}, nil
	})
}

// effects are what the cloud billed and what runs there, for Effects.
func (c *cloudAPI) effects(name string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	running := 0
	for _, v := range c.vms {
		if v.Name == name {
			running++
		}
	}
	return map[string]int{"billed": c.billed[name], "running": running}
}

// vmOperator is the operator of VMs as the docs teach it: each call to
// the cloud is an action that sends the action's key as the client token
// where the cloud takes one, and declares how a lost run resumes. A
// gadget is a VM of size spec.target; status.note is its id and
// status.count its size.
type vmOperator struct {
	cloud *cloudAPI
	http  *http.Client
}

func vmMachine(e *fsmtest.Env) *fsm.Machine[*v1alpha1.Gadget] {
	o := &vmOperator{cloud: cloudOf(e), http: &http.Client{Timeout: 300 * time.Millisecond}}
	return fsm.New[*v1alpha1.Gadget]("vms", fsm.Lifecycle).
		Initial(Provisioning).
		State(Provisioning, o.provision, fsm.To(Running)).
		State(Running, o.run, fsm.To(Resizing)).
		State(Resizing, o.resize, fsm.To(Running)).
		OnDelete(Deleting).
		State(Deleting, o.delete, fsm.To(Deleted)).
		State(Deleted, func(context.Context, *request) fsm.Result { return fsm.Done() }, fsm.Final())
}

func (o *vmOperator) provision(_ context.Context, r *request) fsm.Result {
	name, size := r.Object.Namespace+"/"+r.Object.Name, int(r.Object.Spec.Target)
	a := r.Action("create", func(ctx context.Context, run *fsm.ActionRun) error {
		v, err := o.do(ctx, http.MethodPost, "/vms?"+url.Values{"name": {name}, "size": {strconv.Itoa(size)}, "token": {run.Key}}.Encode())
		if v != nil {
			run.Result = v.ID
		}
		return err
	}, fsm.Observe(func(ctx context.Context, run *fsm.ActionRun) (bool, error) {
		v, err := o.do(ctx, http.MethodGet, "/vms?"+url.Values{"token": {run.Key}}.Encode())
		if errors.Is(err, errNotFound) {
			return false, nil
		}
		if v != nil {
			run.Result = v.ID
		}
		return v != nil, err
	}))
	switch a.State {
	case fsm.ActionPending:
		return fsm.Wait(0, "Creating")
	case fsm.ActionFailed:
		return fsm.Fail(a.Err)
	}
	r.Object.Status.Note, r.Object.Status.Count = a.Result, int32(size)
	return fsm.Next(Running)
}

func (o *vmOperator) run(_ context.Context, r *request) fsm.Result {
	if r.Object.Spec.Target != r.Object.Status.Count {
		return fsm.Next(Resizing)
	}
	return fsm.Done()
}

// resize sets the size, which may be set again: Idempotent.
func (o *vmOperator) resize(_ context.Context, r *request) fsm.Result {
	id, size := r.Object.Status.Note, r.Object.Spec.Target
	a := r.Action("resize-"+strconv.Itoa(int(size)), func(ctx context.Context, _ *fsm.ActionRun) error {
		_, err := o.do(ctx, http.MethodPut, "/vms/"+id+"/size?size="+strconv.Itoa(int(size)))
		return err
	}, fsm.Idempotent(), fsm.ActionKind("resize"))
	switch a.State {
	case fsm.ActionPending:
		return fsm.Wait(0, "Resizing")
	case fsm.ActionFailed:
		return fsm.Fail(a.Err)
	}
	r.Object.Status.Count = size
	return fsm.Next(Running)
}

// delete deletes the VM, which may be deleted again: Idempotent.
func (o *vmOperator) delete(_ context.Context, r *request) fsm.Result {
	id := r.Object.Status.Note
	if id == "" {
		return fsm.Next(Deleted) // never made
	}
	a := r.Action("delete", func(ctx context.Context, _ *fsm.ActionRun) error {
		_, err := o.do(ctx, http.MethodDelete, "/vms/"+id)
		return err
	}, fsm.Idempotent())
	switch a.State {
	case fsm.ActionPending:
		return fsm.Wait(0, "Deleting")
	case fsm.ActionFailed:
		return fsm.Fail(a.Err)
	}
	return fsm.Next(Deleted)
}

// do sends a request to the cloud and reads the VM it answers with.
func (o *vmOperator) do(ctx context.Context, method, path string) (*vm, error) {
	req, err := http.NewRequestWithContext(ctx, method, o.cloud.srv.URL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := o.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return nil, err
	case resp.StatusCode == http.StatusNotFound:
		return nil, errNotFound
	case resp.StatusCode >= 300:
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, body)
	}
	if method == http.MethodDelete {
		return nil, nil
	}
	v := &vm{}
	return v, json.Unmarshal(body, v)
}

// vmLife creates a VM of size 1, resizes it to 2 and deletes it.
func vmLife(e *fsmtest.Env) {
	g := gadget()
	g.Spec.Target = 1
	e.Create(g)
	e.AwaitReady(g)
	e.Update(g, func() { g.Spec.Target = 2 })
	e.Await("the VM resized to 2", func() bool {
		e.Get(g)
		return g.Status.Count == 2 && g.Status.State == Running
	})
	e.Delete(g)
	e.AwaitGone(g)
}

var vmsBilled = fsmtest.Effects(func(e *fsmtest.Env) map[string]int { return cloudOf(e).effects(e.Namespace + "/g") })

// The VM operator, against a cloud that loses the answer of the first
// create, resize and delete after making it, under every combination of
// faults up to the depth (-kfsm.depth; make explore runs 2): crashes,
// failed writes, conflicts, late and lost watch events, crashes inside
// the actions, and calls that fail, lose their answer or time out. Every
// VM is billed once, and none runs once its gadget is gone.
func TestCloudVMsAreBilledOnce(t *testing.T) {
	t.Parallel()
	fsmtest.Explore(t, vmMachine, func(e *fsmtest.Env) {
		vmLife(e)
		if got := cloudOf(e).effects(e.Namespace + "/g"); got["billed"] != 1 || got["running"] != 0 {
			e.T.Errorf("the cloud billed %d VMs and runs %d for the gadget, want 1 and 0", got["billed"], got["running"])
		}
	}, vmsBilled)
}
