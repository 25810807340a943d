//go:build linux

// Command operator is the operator that package effects runs, and kills,
// as separate processes, to count the external effects of durable
// actions: one kfsm lifecycle machine over the Gadgets of one namespace.
//
// A gadget is an order. In state Charge, the handler runs the action
// "charge", whose work posts the order to the payment service (-service)
// with the action's key as its Idempotency-Key, and keeps the charge's id
// as the action's result. Once the action succeeded, the handler writes
// the id into status.note and moves to Charged, which is final. -mode
// declares how an interrupted charge resumes: keys (fsm.Idempotent),
// observe (fsm.Observe, which asks the service for the order's charges)
// or neither.
//
// -call-timeout bounds each request to the service: a charge whose
// answer takes longer fails, as a timeout does, whatever the service did.
//
// -crash kills the process with SIGKILL the first time it reaches the
// point named: before-intent, just before it sends the first status
// write that records an action's intent; after-intent, right after that
// write succeeded; before-outcome, in the work, right after the service
// answered the charge. With -sharded, the process is a replica of the
// group "effects" (sharding.New).
//
// The process prints a line to standard output for each notable event,
// as "<RFC 3339 time> <identity> <event> <gadget> <detail>": started,
// post, observe, charged, indeterminate, and crash before it kills
// itself.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsm/sharding"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
	"github.com/kfsm/kfsm/test/internal/testoperator"
)

// The machine's states.
const (
	Charge  fsm.State = "Charge"
	Charged fsm.State = "Charged"
)

// The crash points of the process.
const (
	BeforeIntent  = "before-intent"
	AfterIntent   = "after-intent"
	BeforeOutcome = "before-outcome"
)

type options struct {
	*testoperator.Process
	service, mode, crash string
	sharded              bool
	callTimeout          time.Duration
	workers, actionLimit int
}

func main() {
	o := options{Process: testoperator.Flags()}
	flag.StringVar(&o.service, "service", "", "base URL of the payment service")
	flag.StringVar(&o.mode, "mode", "neither", "how an interrupted charge resumes: keys, observe or neither")
	flag.StringVar(&o.crash, "crash", "", "the point at which the process kills itself: before-intent, after-intent or before-outcome")
	flag.BoolVar(&o.sharded, "sharded", false, "run as a replica of the group \"effects\"")
	flag.DurationVar(&o.callTimeout, "call-timeout", 2*time.Minute, "how long a charge may take before the process gives up on its answer")
	flag.IntVar(&o.workers, "workers", 4, "how many gadgets the process reconciles at once")
	flag.IntVar(&o.actionLimit, "action-limit", 32, "how many charges run at once: at least the gadgets of a handover round, whose charges are all held open at once")
	flag.Parse()
	switch {
	case o.Identity == "" || o.Namespace == "" || o.service == "":
		testoperator.Usage("-identity, -namespace and -service are required")
	case o.mode != "keys" && o.mode != "observe" && o.mode != "neither":
		testoperator.Usage("-mode %q is none of keys, observe and neither", o.mode)
	case o.crash != "" && o.crash != BeforeIntent && o.crash != AfterIntent && o.crash != BeforeOutcome:
		testoperator.Usage("-crash %q is no crash point of the operator's", o.crash)
	}
	testoperator.Main(func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o options) error {
	out := &reporter{identity: o.Identity}
	crash := &crasher{point: o.crash, out: out}
	cfg, opts, err := o.Setup("effects")
	if err != nil {
		return err
	}
	cfg.Wrap(crash.intents)
	var shards *sharding.Shards
	if o.sharded {
		if shards, err = o.Shards(cfg, &opts, "effects"); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	c := &charges{service: o.service, mode: o.mode, out: out, crash: crash, http: &http.Client{Timeout: o.callTimeout}}
	m := fsm.New[*v1alpha1.Gadget]("effects", fsm.Lifecycle).
		Initial(Charge).
		State(Charge, c.charge, fsm.To(Charged)).
		State(Charged, c.charged, fsm.Final()).
		Tune(fsm.Tuning{Workers: o.workers, ActionLimit: o.actionLimit}).
		PublishGraph(false)
	if shards != nil {
		m = m.Sharded(shards)
	}
	if err := m.SetupWithManager(mgr); err != nil {
		return err
	}
	out.say("started", "-", o.mode)
	return mgr.Start(ctx)
}

// charges holds the machine's handlers and the service they charge.
type charges struct {
	service, mode string
	out           *reporter
	crash         *crasher
	http          *http.Client
}

// charge starts the order's charge and moves on once it succeeded, with
// the charge's id in status.note.
func (c *charges) charge(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
	order := r.Object.Name
	work := func(ctx context.Context, run *fsm.ActionRun) error { return c.post(ctx, order, run) }
	var opts []fsm.ActionOption
	switch c.mode {
	case "keys":
		opts = append(opts, fsm.Idempotent())
	case "observe":
		opts = append(opts, fsm.Observe(func(ctx context.Context, run *fsm.ActionRun) (bool, error) {
			return c.observe(ctx, order, run)
		}))
	}
	a := r.Action("charge", work, opts...)
	switch a.State {
	case fsm.ActionSucceeded:
		r.Object.Status.Note = a.Result
		c.out.say("charged", order, a.Result)
		return fsm.Next(Charged)
	case fsm.ActionFailed:
		return fsm.Fail(a.Err)
	case fsm.ActionIndeterminate:
		c.out.say("indeterminate", order, a.Key)
		return fsm.Wait(0, "Unknown")
	}
	return fsm.Wait(0, "Charging")
}

func (c *charges) charged(context.Context, *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
	return fsm.Done()
}

// charge is what the service answers about a charge.
type charge struct {
	ID string `json:"id"`
}

// post charges the order under the run's key and keeps the charge's id
// as the run's result.
func (c *charges) post(ctx context.Context, order string, run *fsm.ActionRun) error {
	c.out.say("post", order, run.Key)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.service+"/charges?order="+url.QueryEscape(order), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Idempotency-Key", run.Key)
	var ch charge
	if err := c.do(req, &ch); err != nil {
		return err
	}
	c.crash.reached(BeforeOutcome, order)
	run.Result = ch.ID
	return nil
}

// observe asks the service for the order's charges: one means the
// interrupted run took effect.
func (c *charges) observe(ctx context.Context, order string, run *fsm.ActionRun) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.service+"/charges?order="+url.QueryEscape(order), nil)
	if err != nil {
		return false, err
	}
	var found []charge
	if err := c.do(req, &found); err != nil {
		return false, err
	}
	c.out.say("observe", order, fmt.Sprintf("%s,found=%d", run.Key, len(found)))
	if len(found) == 0 {
		return false, nil
	}
	run.Result = found[0].ID
	return true, nil
}

// do sends req and decodes the service's answer into v.
func (c *charges) do(req *http.Request, v any) error {
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: the service answered %s", req.Method, req.URL.Path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// crasher kills the process at its crash point, the first time it is
// reached.
type crasher struct {
	point string
	out   *reporter
	fired atomic.Bool
}

// reached kills the process if point is its crash point and this is the
// first time. It says which gadget reached it, first.
func (c *crasher) reached(point, gadget string) {
	if c.point != point || !c.fired.CompareAndSwap(false, true) {
		return
	}
	c.out.say("crash", gadget, point)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way: nothing more of this goroutine runs
}

// intents wraps the API server's transport for the crash points around
// the status write that records an action's intent.
func (c *crasher) intents(rt http.RoundTripper) http.RoundTripper {
	if c.point != BeforeIntent && c.point != AfterIntent {
		return rt
	}
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		gadget, intent, err := intentWrite(req)
		if err != nil || !intent {
			return rt.RoundTrip(req)
		}
		c.reached(BeforeIntent, gadget)
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusOK {
			c.reached(AfterIntent, gadget)
		}
		return resp, err
	})
}

// intentWrite says whether req is a status patch of a gadget that
// records an action's intent: a record with a key and no outcome. Its
// body stays readable.
func intentWrite(req *http.Request) (gadget string, intent bool, err error) {
	path := strings.TrimSuffix(req.URL.Path, "/status")
	if req.Method != http.MethodPatch || path == req.URL.Path || !strings.Contains(path, "/gadgets/") || req.GetBody == nil {
		return "", false, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return "", false, err
	}
	defer func() { _ = body.Close() }()
	b, err := io.ReadAll(body)
	if err != nil {
		return "", false, err
	}
	intent = bytes.Contains(b, []byte(`"actions"`)) && bytes.Contains(b, []byte(`"key"`)) && !bytes.Contains(b, []byte(`"outcome"`))
	return path[strings.LastIndex(path, "/")+1:], intent, nil
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// reporter prints the lines that the test reads.
type reporter struct {
	identity string
	mu       sync.Mutex
}

func (r *reporter) say(event, gadget, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Printf("%s %s %s %s %s\n", time.Now().Format(time.RFC3339Nano), r.identity, event, gadget, detail)
}
