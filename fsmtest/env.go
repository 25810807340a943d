package fsmtest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest/internal/explore"
)

// Epoch is where every Env's fake clock starts.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Env is one test's part of the package's cluster: a namespace of its
// own, a client for the test's own reads and writes, a fake clock, and
// what the operator under test did there (its API writes, its handler
// runs and transitions), which the assertions read.
type Env struct {
	T testing.TB
	// Namespace is the test's own; operators started with Run see only it
	// (and cluster-scoped objects).
	Namespace string
	// Client reads and writes as the test, directly on the API server.
	// Its writes are not counted as the operator's.
	Client client.WithWatch
	// Scheme has client-go's types and those of Options.AddToScheme.
	Scheme *runtime.Scheme
	// Clock is a fake clock at Epoch. Give it to a machine with
	// WithClock; then a Timeout, a Wait or a backoff waits until the test
	// moves it with Clock.Step, under either driver.
	Clock *clocktesting.FakeClock
	// Timeout bounds every Await; the default is two minutes.
	Timeout time.Duration

	api     *apiLog
	polling atomic.Bool // an Await reads what it waits for (see Get)
	seenMu  sync.Mutex
	seen    map[apiKey]int64 // the newest version of each object that the test wrote or read
	walks   *walkLog
	actions *actionLog

	kindsMu        sync.Mutex
	parents, owned []schema.GroupVersionKind
	resources      map[string]apiKey // the group and resource of each machine's objects
	driver         driver
	snap           *snapshots      // set in fault-injection runs
	faults         *explore.Faults // set in fault-injection runs, for Outside's calls
	calls          atomic.Int64    // calls to outside systems so far
	drifts         drifts          // the changes that outside systems make behind the operator
	changes        atomic.Int64    // the scenario's changes so far, where drifts strike
	processes      sync.Map        // the operator process of each machine: *fsm.Machine[T] → *process
	mapper         meta.RESTMapper // shared by the client and the operator's managers, in Explore's runs
}

// New gives the test a namespace of its own in the package's cluster.
// Main must be the package's TestMain.
func New(t testing.TB) *Env {
	t.Helper()
	return newEnv(t, nil)
}

// newEnv is New with the RESTMapper that the Env's client and its
// operator's managers share, or with one of their own each when nil.
func newEnv(t testing.TB, mapper meta.RESTMapper) *Env {
	t.Helper()
	cl, err := started()
	switch {
	case err != nil:
		t.Fatal(err)
	case cl == nil && testing.Short():
		t.Skip("fsmtest: this test needs an API server, which -short does not start")
	case cl == nil:
		t.Fatal("fsmtest: no cluster: the package's TestMain must call fsmtest.Main")
	}
	cfg := rest.CopyConfig(cl.Config)
	cfg.QPS, cfg.Burst = -1, 0 // Await polls; client-side throttling would slow every read
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: pkg.scheme, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fsmtest-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("fsmtest: creating the test's namespace: %v", err)
	}
	e := &Env{
		T: t, Namespace: ns.Name, Client: c, Scheme: pkg.scheme,
		Clock: clocktesting.NewFakeClock(Epoch), Timeout: 2 * time.Minute,
		api: newAPILog(), walks: &walkLog{}, actions: newActionLog(), mapper: mapper,
	}
	pkg.mu.Lock()
	pkg.envs[e.Namespace] = e
	pkg.mu.Unlock()
	t.Cleanup(func() {
		pkg.mu.Lock()
		delete(pkg.envs, e.Namespace)
		pkg.mu.Unlock()
		e.checkWalks()
	})
	return e
}

// Kubectl runs kubectl on the package's cluster, in the test's namespace,
// and returns what it printed: to test what a user sees, such as printer
// columns.
func (e *Env) Kubectl(args ...string) (string, error) {
	args = append([]string{"--kubeconfig", pkg.cluster.Kubeconfig, "--namespace", e.Namespace}, args...)
	out, err := exec.Command(pkg.cluster.Assets.Kubectl(), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args[4:], " "), err, out)
	}
	return string(out), nil
}

// Config is the cluster's rest.Config, without client-side throttling.
func (e *Env) Config() *rest.Config {
	cfg := rest.CopyConfig(pkg.cluster.Config)
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// operatorConfig is the configuration of the operator's clients: the API
// server through a transport that counts the operator's writes and
// injects faults.
func (e *Env) operatorConfig(l *life) *rest.Config {
	cfg := e.Config()
	// JSON for every kind, so that fsmtest can read what the operator
	// writes and the events its watches deliver.
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	cfg.Impersonate = pkg.operatorAs
	cfg.Wrap(func(rt httpRoundTripper) httpRoundTripper { return &transport{next: rt, api: e.api, life: l} })
	return cfg
}

// Create creates obj in the test's namespace (unless it is cluster-scoped
// or names one) as the test.
func (e *Env) Create(obj client.Object) {
	e.T.Helper()
	e.inNamespace(obj)
	e.drift("create " + e.describe(obj))
	walks := e.walks.count()
	if err := e.Client.Create(context.Background(), obj); err != nil {
		e.T.Fatalf("fsmtest: creating %s: %v", e.describe(obj), err)
	}
	k := e.apiKey(obj)
	e.saw(k, obj)
	e.snap.created(k)
	e.snap.change("create "+e.describe(obj), walks)
}

// Update reads obj, applies change to it and writes it back as the test,
// again if someone else changed it meanwhile. change mutates obj.
func (e *Env) Update(obj client.Object, change func()) {
	e.T.Helper()
	e.inNamespace(obj)
	e.drift("update " + e.describe(obj))
	walks := e.walks.count()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return e.Client.Update(context.Background(), obj)
	})
	if err != nil {
		e.T.Fatalf("fsmtest: updating %s: %v", e.describe(obj), err)
	}
	e.saw(e.apiKey(obj), obj)
	e.snap.change("update "+e.describe(obj), walks)
}

// Delete deletes obj as the test; its finalizers may keep it a while.
func (e *Env) Delete(obj client.Object) {
	e.T.Helper()
	e.inNamespace(obj)
	e.drift("delete " + e.describe(obj))
	walks := e.walks.count()
	if err := e.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
		e.T.Fatalf("fsmtest: deleting %s: %v", e.describe(obj), err)
	}
	e.snap.deleted(walks)
}

// Get reads obj from the API server into obj, and reports whether it
// exists.
//
// Within an Await's condition, it reads the API server's watch cache
// rather than etcd, no older than every version of obj that the test and
// the operator wrote or the test read: a condition is read again until it
// holds, and the API server serves such a read for a fraction of the
// cost of one from etcd. One write escapes it: a patch that takes the
// last finalizer off a deleted object deletes it, and answers with the
// version before; such a read may find the object a moment longer.
func (e *Env) Get(obj client.Object) bool {
	e.T.Helper()
	e.inNamespace(obj)
	k := e.apiKey(obj)
	var opts []client.GetOption
	if e.polling.Load() {
		e.seenMu.Lock()
		floor := max(e.seen[k], e.api.written(k))
		e.seenMu.Unlock()
		if floor > 0 {
			opts = append(opts, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: strconv.FormatInt(floor, 10)}})
		}
	}
	err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj, opts...)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		e.T.Fatalf("fsmtest: reading %s: %v", e.describe(obj), err)
	}
	e.saw(k, obj)
	return true
}

// fresh reads cond past the watch cache, from what the API server holds.
func (e *Env) fresh(cond func() (bool, string)) (bool, string) {
	polling := e.polling.Swap(false)
	defer e.polling.Store(polling)
	return cond()
}

// saw notes the resource version of obj, whose key is k, as the test
// wrote or read it.
func (e *Env) saw(k apiKey, obj client.Object) {
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	e.seenMu.Lock()
	defer e.seenMu.Unlock()
	if e.seen == nil {
		e.seen = map[apiKey]int64{}
	}
	e.seen[k] = max(e.seen[k], rv)
}

// inNamespace puts obj in the test's namespace when it names none and its
// kind is namespaced.
func (e *Env) inNamespace(obj client.Object) {
	if obj.GetNamespace() != "" {
		return
	}
	if namespaced, err := apiutil.IsObjectNamespaced(obj, e.Scheme, e.Client.RESTMapper()); err == nil && namespaced {
		obj.SetNamespace(e.Namespace)
	}
}

// kindOf returns obj's group and kind from the scheme.
func (e *Env) kindOf(obj runtime.Object) schema.GroupVersionKind {
	gvk, err := apiutil.GVKForObject(obj, e.Scheme)
	if err != nil {
		e.T.Fatalf("fsmtest: %v", err)
	}
	return gvk
}

// describe names obj for messages: Kind/name.
func (e *Env) describe(obj client.Object) string {
	return fmt.Sprintf("%s/%s", e.kindOf(obj).Kind, obj.GetName())
}

// walkLog keeps the walks of the operator's reconciles in the test's
// namespace, by object.
type walkLog struct {
	mu    sync.Mutex
	walks []machineWalk
}

type machineWalk struct {
	machine string
	fsm.Walk
	written int64     // the newest version of the object the operator had written when the walk ended
	at      time.Time // by the test's fake clock
	replica string    // the identity of the replica that walked, under Replicas
}

func (l *walkLog) add(w machineWalk) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.walks = append(l.walks, w)
}

// of returns the walks of obj, from the i-th on: those of its UID, or of
// its name when it has none yet.
func (l *walkLog) of(obj client.Object, from int) ([]fsm.Walk, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []fsm.Walk
	for _, w := range l.walks[min(from, len(l.walks)):] {
		if w.Object.Name == obj.GetName() && (obj.GetUID() == "" || w.UID == obj.GetUID()) {
			out = append(out, w.Walk)
		}
	}
	return out, len(l.walks)
}

// noteResource notes the group and resource of machine's objects.
func (e *Env) noteResource(machine string, obj client.Object) {
	k := e.apiKey(obj)
	e.kindsMu.Lock()
	defer e.kindsMu.Unlock()
	if e.resources == nil {
		e.resources = map[string]apiKey{}
	}
	e.resources[machine] = apiKey{Group: k.Group, Resource: k.Resource}
}

// observed records a walk of machine in the test's namespace.
func (e *Env) observed(machine string, w fsm.Walk, p *process) {
	e.kindsMu.Lock()
	k := e.resources[machine]
	e.kindsMu.Unlock()
	k.Namespace, k.Name = w.Object.Namespace, w.Object.Name
	mw := machineWalk{machine: machine, Walk: w, written: e.api.written(k), at: e.Clock.Now()}
	if p != nil {
		mw.replica = p.identity
	}
	e.walks.add(mw)
}

// bind notes that machine m runs in process p, for its observers.
func (e *Env) bind(m any, p *process) { e.processes.Store(m, p) }

// processOf returns the process that machine m runs in, or nil.
func (e *Env) processOf(m any) *process {
	p, _ := e.processes.Load(m)
	proc, _ := p.(*process)
	return proc
}

// fatalf fails the test; in a faulty run, the message names the fault
// (Explore's report adds the command that replays the run).
func (e *Env) fatalf(format string, args ...any) {
	e.T.Helper()
	e.T.Fatal("fsmtest: " + e.snap.faultPoint() + fmt.Sprintf(format, args...) + e.api.refused())
}

// latest returns, for each object by name, the newest version of it that
// the operator had written when one of its walks ended.
// nextTimer is the earliest time after now, by the test's fake clock,
// at which an object's latest walk asked to run again, or zero: for a
// machine on the fake clock, its next timer. With backoffs, only the
// walks that failed count, whose timer is a failure's backoff.
func (l *walkLog) nextTimer(now time.Time, backoffs bool) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := map[types.UID]machineWalk{}
	for _, w := range l.walks {
		last[w.UID] = w
	}
	var next time.Time
	for _, w := range last {
		var failed *fsm.HandlerError
		if w.Soon || w.RequeueAfter <= 0 || backoffs && !errors.As(w.Err, &failed) {
			continue
		}
		if due := w.at.Add(w.RequeueAfter); due.After(now) && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	return next
}

func (l *walkLog) latest() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int64{}
	for _, w := range l.walks {
		out[w.Object.Name] = max(out[w.Object.Name], w.written)
	}
	return out
}
