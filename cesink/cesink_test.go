package cesink_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kfsm/kfsm/cesink"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// The states of the test machine.
const (
	Queued   fsm.State = "Queued"
	Working  fsm.State = "Working"
	Finished fsm.State = "Finished"
)

// relay is the test machine: Queued → Working → Finished, in two walks,
// since Working waits once. Its three transitions get two times.
func relay() *fsm.Machine[*v1alpha1.Gadget] {
	return fsm.New[*v1alpha1.Gadget]("relay", fsm.Lifecycle).
		Initial(Queued).
		State(Queued, func(context.Context, *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
			return fsm.Next(Working)
		}, fsm.To(Working)).
		State(Working, func(_ context.Context, r *fsm.Request[*v1alpha1.Gadget]) fsm.Result {
			if r.Object.Status.Count == 0 {
				r.Object.Status.Count++
				return fsm.Wait(20*time.Millisecond, "Warming")
			}
			return fsm.Next(Finished)
		}, fsm.To(Finished)).
		State(Finished, nil, fsm.Final())
}

// attributes are what a receiver sees of an event.
type attributes struct {
	SpecVersion, ID, Source, Type, Subject, DataContentType string
	Time                                                    time.Time
	Data                                                    cesink.Data
}

func attributesOf(t testing.TB, e cloudevents.Event) attributes {
	t.Helper()
	a := attributes{
		SpecVersion: e.SpecVersion(), ID: e.ID(), Source: e.Source(), Type: e.Type(), Subject: e.Subject(),
		DataContentType: e.DataContentType(), Time: e.Time(),
	}
	if err := e.DataAs(&a.Data); err != nil {
		t.Errorf("event %s: decoding its data: %v", e.ID(), err)
	}
	return a
}

// told is a transition as kfsm told it to the observers.
type told struct {
	obj *v1alpha1.Gadget
	t   fsm.Transition
}

// witness records what kfsm tells the observers, next to the sink.
type witness struct {
	mu  sync.Mutex
	all []told
}

func (w *witness) observe(_ context.Context, obj *v1alpha1.Gadget, t fsm.Transition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = append(w.all, told{obj: obj.DeepCopy(), t: t})
}

func (w *witness) of(uid types.UID) []told {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []told
	for _, x := range w.all {
		if x.obj.UID == uid {
			out = append(out, x)
		}
	}
	return out
}

// gadgetKind is the Gadget's group, version and kind, as events name it.
var gadgetKind = v1alpha1.GroupVersion.WithKind("Gadget")

// want is the event of transition t of obj with the default options.
func want(obj *v1alpha1.Gadget, t fsm.Transition) attributes {
	return attributes{
		SpecVersion: "1.0", ID: cesink.ID(obj.UID, t), Source: "kfsm/relay", Type: "dev.kfsm.transition",
		Subject: obj.Namespace + "/" + obj.Name, DataContentType: "application/json", Time: t.Time.Time,
		Data: cesink.Data{
			Machine: "relay",
			Object: cesink.ObjectRef{Group: gadgetKind.Group, Version: gadgetKind.Version, Kind: gadgetKind.Kind,
				Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID},
			From: t.From, To: t.To, Reason: t.Reason,
		},
	}
}

func TestOneEventPerCommittedTransition(t *testing.T) {
	e := fsmtest.New(t)
	r := receive(t)
	m := relay()
	send := cesink.New(m, r.client(t))
	w := &witness{}
	m.Observe(send).Observe(fsm.Observers[*v1alpha1.Gadget]{Transition: w.observe})
	fsmtest.Run(e, m)

	gadgets := []*v1alpha1.Gadget{
		{ObjectMeta: metav1.ObjectMeta{Name: "alpha"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "beta"}},
	}
	for _, g := range gadgets {
		e.Create(g)
	}
	for _, g := range gadgets {
		e.AwaitState(g, Finished)
		e.AwaitReady(g)
	}
	e.Await("an event per transition", func() bool { return len(r.all()) == 6 })

	ids := map[string]bool{}
	for _, g := range gadgets {
		// What kfsm told is what the status records: the committed
		// transitions, in order (the history keeps times to the second).
		told := w.of(g.UID)
		var history []fsm.Transition
		for _, x := range told {
			tr := x.t
			tr.Time = metav1.NewTime(tr.Time.Truncate(time.Second))
			history = append(history, tr)
		}
		if diff := cmp.Diff(g.Status.History, history); diff != "" {
			t.Errorf("%s: the transitions told to the observers are not those of status.history (-history +told):\n%s", g.Name, diff)
		}

		var wantEvents, got []attributes
		for _, x := range told {
			wantEvents = append(wantEvents, want(g, x.t))
		}
		for _, ev := range r.all() {
			if a := attributesOf(t, ev); a.Data.Object.UID == g.UID {
				got = append(got, a)
			}
		}
		if diff := cmp.Diff(wantEvents, got); diff != "" {
			t.Errorf("%s: events received (-want +got):\n%s", g.Name, diff)
		}
		if diff := cmp.Diff([]string{"→Queued", "Queued→Working", "Working→Finished"}, edges(got)); diff != "" {
			t.Errorf("%s: transitions sent (-want +got):\n%s", g.Name, diff)
		}
		for _, a := range got {
			if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(a.ID) {
				t.Errorf("%s: event id %q is not 32 hexadecimal digits", g.Name, a.ID)
			}
			if ids[a.ID] {
				t.Errorf("%s: event id %s of %s→%s was already given to another transition", g.Name, a.ID, a.Data.From, a.Data.To)
			}
			ids[a.ID] = true
		}
	}

	// The same transitions told again give the same events, ids included,
	// so that a receiver can drop them.
	first := r.all()
	for _, g := range gadgets {
		for _, x := range w.of(g.UID) {
			send.Transition(context.Background(), x.obj, x.t)
		}
	}
	var again []attributes
	for _, ev := range r.all()[len(first):] {
		again = append(again, attributesOf(t, ev))
	}
	var wantAgain []attributes
	for _, g := range gadgets {
		for _, ev := range first {
			if a := attributesOf(t, ev); a.Data.Object.UID == g.UID {
				wantAgain = append(wantAgain, a)
			}
		}
	}
	if diff := cmp.Diff(wantAgain, again); diff != "" {
		t.Errorf("events of the same transitions told again (-first +again):\n%s", diff)
	}
}

// A status write that fails undoes the walk's transitions: no event is
// sent for them, and the walk that runs again sends its own.
func TestNoEventForATransitionWhoseStatusWriteFailed(t *testing.T) {
	e := fsmtest.New(t)
	r := receive(t)
	m := relay()
	m.Observe(cesink.New(m, r.client(t)))

	var failedAt atomic.Pointer[time.Time]
	conflictOnce := interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if sub == "status" && obj.GetName() == "contested" {
				now := time.Now()
				if failedAt.CompareAndSwap(nil, &now) {
					return apierrors.NewConflict(schema.GroupResource{Group: gadgetKind.Group, Resource: "gadgets"}, obj.GetName(), errors.New("changed meanwhile"))
				}
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
	fsmtest.Run(e, m, fsmtest.WithManagerOptions(func(o *ctrl.Options) {
		o.NewClient = func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, opts)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, conflictOnce), nil
		}
	}))

	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "contested"}}
	e.Create(g)
	e.AwaitState(g, Finished)
	e.AwaitReady(g)

	if failedAt.Load() == nil {
		t.Fatal("no status write failed")
	}
	var thrownAway int
	for _, wk := range e.Walks(g) {
		if !wk.Committed && len(wk.Edges) > 0 {
			thrownAway++
		}
	}
	if thrownAway != 1 {
		t.Fatalf("%d walks that took edges were thrown away, want the one whose status write failed", thrownAway)
	}

	e.Await("an event per committed transition", func() bool { return len(r.all()) >= 3 })
	var got []attributes
	for _, ev := range r.all() {
		got = append(got, attributesOf(t, ev))
	}
	if diff := cmp.Diff([]string{"→Queued", "Queued→Working", "Working→Finished"}, edges(got)); diff != "" {
		t.Errorf("transitions sent (-want +got):\n%s", diff)
	}
	// The thrown-away walk moved before its write failed; every event
	// sent is of a later walk.
	for _, a := range got {
		if !a.Time.After(*failedAt.Load()) {
			t.Errorf("an event of %s→%s at %v, before the status write failed at %v: the thrown-away walk was sent",
				a.Data.From, a.Data.To, a.Time, *failedAt.Load())
		}
	}
	var history []string
	for _, tr := range g.Status.History {
		history = append(history, string(tr.From)+"→"+string(tr.To))
	}
	if diff := cmp.Diff(history, edges(got)); diff != "" {
		t.Errorf("events are not those of status.history (-history +events):\n%s", diff)
	}
}

// A receiver that refuses connections, or takes them and never answers,
// delays each transition by at most the timeout, and each event that is
// lost is logged through the reconcile's logger.
func TestADownReceiverDoesNotStallTheMachine(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for name, target := range map[string]func(testing.TB) string{
		"Refusing": refusing,
		"Silent":   silent,
	} {
		t.Run(name, func(t *testing.T) {
			e := fsmtest.New(t)
			events, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(target(t)))
			if err != nil {
				t.Fatal(err)
			}
			m := relay()
			m.Observe(cesink.New(m, events, cesink.Timeout(timeout)))
			logs := &errorLog{}
			fsmtest.Run(e, m, fsmtest.WithManagerOptions(func(o *ctrl.Options) { o.Logger = logr.New(logs) }))

			g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "unheard"}}
			began := time.Now()
			e.Create(g)
			e.AwaitState(g, Finished)
			e.AwaitReady(g)
			// Three transitions, each held at most the timeout; the rest
			// is the machine's own pace, well under a few seconds.
			if took, bound := time.Since(began), 3*timeout+5*time.Second; took > bound {
				t.Errorf("the gadget took %v to finish, more than %v", took, bound)
			}

			e.Await("a logged error per lost event", func() bool { return len(logs.lost()) == 3 })
			var history []string
			for _, tr := range g.Status.History {
				history = append(history, string(tr.From)+"→"+string(tr.To))
			}
			var got []string
			for _, l := range logs.lost() {
				got = append(got, l.values["from"]+"→"+l.values["to"])
				if l.values["event"] == "" || l.err == nil {
					t.Errorf("the log of a lost event has event id %q and error %v, want both", l.values["event"], l.err)
				}
				if l.values["controllerKind"] != "Gadget" {
					t.Errorf("a lost event was not logged through the reconcile's logger: values %v", l.values)
				}
			}
			if diff := cmp.Diff(history, got); diff != "" {
				t.Errorf("lost events logged (-history +logged):\n%s", diff)
			}
		})
	}
}

// With the default timeout, an event to a receiver that never answers
// holds the caller one second.
func TestDefaultTimeoutIsOneSecond(t *testing.T) {
	events, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(silent(t)))
	if err != nil {
		t.Fatal(err)
	}
	send := cesink.New(relay(), events).Transition
	logs := &errorLog{}
	ctx := logf.IntoContext(context.Background(), logr.New(logs))
	began := time.Now()
	send(ctx, gadget("default", "slow"), fsm.Transition{To: Queued, Reason: fsm.ReasonCreated, Time: metav1.Now()})
	if took := time.Since(began); took < time.Second || took > time.Second+500*time.Millisecond {
		t.Errorf("sending to a silent receiver took %v, want one second", took)
	}
	if n := len(logs.lost()); n != 1 {
		t.Errorf("%d lost events logged, want 1", n)
	}
}

func TestOptionsAndSubject(t *testing.T) {
	at := metav1.NewTime(time.Date(2030, 1, 1, 12, 0, 0, 123456789, time.UTC))
	moved := fsm.Transition{From: Queued, To: Working, Reason: fsm.ReasonNext, Time: at}
	cases := map[string]struct {
		reason string
		opts   []cesink.Option
		obj    *v1alpha1.Gadget
		want   func(*attributes)
	}{
		"Defaults": {
			reason: "The source names the machine, and the type is kfsm's.",
			obj:    gadget("shop", "front"),
			want:   func(*attributes) {},
		},
		"Source": {
			reason: "Source replaces the source.",
			opts:   []cesink.Option{cesink.Source("//cluster-a/kfsm/relay")},
			obj:    gadget("shop", "front"),
			want:   func(a *attributes) { a.Source = "//cluster-a/kfsm/relay" },
		},
		"TypePrefix": {
			reason: "TypePrefix puts the type in the author's namespace.",
			opts:   []cesink.Option{cesink.TypePrefix("com.example.orders")},
			obj:    gadget("shop", "front"),
			want:   func(a *attributes) { a.Type = "com.example.orders.transition" },
		},
		"ClusterScoped": {
			reason: "An object without a namespace is its name alone.",
			obj:    gadget("", "front"),
			want:   func(a *attributes) { a.Subject = "front" },
		},
	}
	r := receive(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := len(r.all())
			cesink.New(relay(), r.client(t), tc.opts...).Transition(context.Background(), tc.obj, moved)
			all := r.all()
			if len(all) != before+1 {
				t.Fatalf("%s\n%d events received, want 1", tc.reason, len(all)-before)
			}
			w := want(tc.obj, moved)
			tc.want(&w)
			if diff := cmp.Diff(w, attributesOf(t, all[before])); diff != "" {
				t.Errorf("%s\n(-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// An object without a kind (kfsm sets it on the objects it gives
// Transition observers; another caller may not) cannot be named: nothing is sent,
// and the transition logs why.
func TestAnObjectWithoutAKindSendsNothing(t *testing.T) {
	r := receive(t)
	send := cesink.New(relay(), r.client(t)).Transition
	logs := &errorLog{}
	ctx := logf.IntoContext(context.Background(), logr.New(logs))
	bare := gadget("shop", "front")
	bare.TypeMeta = metav1.TypeMeta{}
	send(ctx, bare, fsm.Transition{To: Queued, Reason: fsm.ReasonCreated, Time: metav1.Now()})
	if n := len(r.all()); n != 0 {
		t.Errorf("%d events received, want none", n)
	}
	if got := logs.all(); len(got) != 1 || got[0].err == nil || !strings.Contains(got[0].err.Error(), "no apiVersion and kind") {
		t.Errorf("logged %v, want one error saying that the object has no kind", got)
	}
}

func TestIDCoversEachPartOfTheTransition(t *testing.T) {
	at := metav1.NewTime(time.Date(2030, 1, 1, 12, 0, 0, 1, time.UTC))
	base := fsm.Transition{From: Queued, To: Working, Reason: fsm.ReasonNext, Time: at}
	id := cesink.ID("uid-1", base)
	if again := cesink.ID("uid-1", base); again != id {
		t.Errorf("the same transition gave ids %s and %s", id, again)
	}
	// As the documentation says, for receivers in other languages.
	digest := sha256.Sum256([]byte("uid-1\x00" + strconv.FormatInt(at.UnixNano(), 10) + "\x00Queued\x00Working\x00"))
	if documented := hex.EncodeToString(digest[:16]); id != documented {
		t.Errorf("ID = %s, want %s as documented", id, documented)
	}
	changes := map[string]struct {
		uid types.UID
		t   fsm.Transition
	}{
		"UID":        {"uid-2", base},
		"Time":       {"uid-1", fsm.Transition{From: Queued, To: Working, Reason: fsm.ReasonNext, Time: metav1.NewTime(at.Add(time.Nanosecond))}},
		"From":       {"uid-1", fsm.Transition{From: "", To: Working, Reason: fsm.ReasonNext, Time: at}},
		"To":         {"uid-1", fsm.Transition{From: Queued, To: Finished, Reason: fsm.ReasonNext, Time: at}},
		"FromIntoTo": {"uid-1", fsm.Transition{From: "", To: Queued + Working, Reason: fsm.ReasonNext, Time: at}},
	}
	for name, c := range changes {
		if got := cesink.ID(c.uid, c.t); got == id {
			t.Errorf("%s: a different transition has the same id %s", name, got)
		}
	}
}

// edges are events as from→to.
func edges(events []attributes) []string {
	var out []string
	for _, a := range events {
		out = append(out, string(a.Data.From)+"→"+string(a.Data.To))
	}
	return out
}

func gadget(namespace, name string) *v1alpha1.Gadget {
	return &v1alpha1.Gadget{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Gadget"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name)},
	}
}

// receiver is a CloudEvents receiver on a loopback port, the SDK's HTTP
// protocol, which keeps what it gets in order.
type receiver struct {
	url    string
	mu     sync.Mutex
	events []cloudevents.Event
}

func receive(t testing.TB) *receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := cloudevents.NewHTTP(cehttp.WithListener(l))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{url: "http://" + l.Addr().String()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		_ = c.StartReceiver(ctx, func(e cloudevents.Event) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events = append(r.events, e)
		})
	}()
	return r
}

func (r *receiver) all() []cloudevents.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cloudevents.Event(nil), r.events...)
}

// client is a CloudEvents client that sends to r.
func (r *receiver) client(t testing.TB) cloudevents.Client {
	t.Helper()
	c, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(r.url))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refusing is the URL of a loopback port where nothing listens.
func refusing(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return url
}

// silent is the URL of a loopback port that takes connections and never
// answers.
func silent(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// errorLog is a logr sink that keeps the errors logged.
type errorLog struct {
	values []any // of this logger, from WithValues
	root   *errorLog

	mu     sync.Mutex
	errors []loggedError
}

type loggedError struct {
	msg    string
	err    error
	values map[string]string
}

func (l *errorLog) Init(logr.RuntimeInfo)    {}
func (l *errorLog) Enabled(int) bool         { return false }
func (l *errorLog) Info(int, string, ...any) {}

func (l *errorLog) Error(err error, msg string, kv ...any) {
	values := map[string]string{}
	all := append(append([]any(nil), l.values...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		if k, ok := all[i].(string); ok {
			values[k] = fmtValue(all[i+1])
		}
	}
	r := l.rootLog()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, loggedError{msg: msg, err: err, values: values})
}

func (l *errorLog) WithValues(kv ...any) logr.LogSink {
	return &errorLog{values: append(append([]any(nil), l.values...), kv...), root: l.rootLog()}
}

func (l *errorLog) WithName(string) logr.LogSink { return l }

func (l *errorLog) rootLog() *errorLog {
	if l.root != nil {
		return l.root
	}
	return l
}

func (l *errorLog) all() []loggedError {
	r := l.rootLog()
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]loggedError(nil), r.errors...)
}

// lost are the errors logged for events that were not delivered.
func (l *errorLog) lost() []loggedError {
	var out []loggedError
	for _, e := range l.all() {
		if e.msg == "the transition's CloudEvent was not delivered" {
			out = append(out, e)
		}
	}
	return out
}

func fmtValue(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case fsm.State:
		return string(v)
	case interface{ String() string }:
		return v.String()
	}
	return ""
}
