package fsm

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace/noop"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// benchObject is a minimal kfsm object; the test API cannot be imported
// here without an import cycle.
type benchObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            Status `json:"status,omitempty"`
}

func (o *benchObject) FSMStatus() *Status { return &o.Status }

func (o *benchObject) DeepCopyObject() runtime.Object {
	c := &benchObject{TypeMeta: o.TypeMeta}
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	o.Status.DeepCopyInto(&c.Status)
	return c
}

// benchObjectList is a list of them.
type benchObjectList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []benchObject `json:"items"`
}

func (l *benchObjectList) DeepCopyObject() runtime.Object {
	c := &benchObjectList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	for _, o := range l.Items {
		c.Items = append(c.Items, *o.DeepCopyObject().(*benchObject))
	}
	return c
}

var benchGVK = schema.GroupVersionKind{Group: "bench.kfsm.dev", Version: "v1", Kind: "BenchObject"}

// nopRecorder drops events, as a recorder that is not listened to would.
type nopRecorder struct{}

func (nopRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}

func benchMachine() *Machine[*benchObject] {
	m := New[*benchObject]("bench", Lifecycle).
		Tune(Tuning{TracerProvider: noop.NewTracerProvider()}).
		Initial("A").
		State("A", func(context.Context, *Request[*benchObject]) Result { return Next("B") }, To("B")).
		State("B", func(context.Context, *Request[*benchObject]) Result { return Wait(0, "Resting") }, To("A"))
	if err := m.Build(); err != nil {
		panic(err)
	}
	return m
}

// BenchmarkStep is one transition as the engine makes it: the handler of A
// moves to B (edge check, history, spans), B's handler waits, the
// conditions are set, and the transition is committed (metrics, event).
// No client I/O.
func BenchmarkStep(b *testing.B) {
	m := benchMachine()
	r, err := newReconciler(m, nil, nil, nopRecorder{})
	if err != nil {
		b.Fatal(err)
	}
	obj := &benchObject{ObjectMeta: metav1.ObjectMeta{Name: "o", Namespace: "ns", Generation: 1}}
	ctx := logr.NewContext(context.Background(), logr.Discard())
	r.walk(ctx, obj, obj, false).commit() // the first walk creates the history and conditions
	b.ReportAllocs()
	for b.Loop() {
		obj.Status.State = "A"
		w := r.walk(ctx, obj, obj, false)
		w.commit()
		w.release()
	}
	if obj.Status.State != "B" {
		b.Fatalf("state = %s, want B", obj.Status.State)
	}
}

// convergedObject stores an object in a fake client and reconciles it
// once with a machine whose only state is final: what is left is a
// converged object, as kfsm wrote it, and its reconciler, which reads
// through a cache of it as a manager's client does (see cachedClient).
func convergedObject(b *testing.B) (*cachedClient, reconcile.Reconciler) {
	c, r := readyReconciler(b)
	ctx := logr.NewContext(context.Background(), logr.Discard())
	if _, err := r.Reconcile(ctx, benchRequest); err != nil {
		b.Fatal(err)
	}
	c.cache(b)
	return c, r
}

// readyReconciler is the reconciler, over a fake client that stores
// ns/o, of a machine whose only state is final.
func readyReconciler(tb testing.TB) (*cachedClient, *reconciler[*benchObject]) {
	c := &cachedClient{Client: benchClient()}
	m := New[*benchObject]("ready", Lifecycle).
		Tune(Tuning{TracerProvider: noop.NewTracerProvider()}).
		Initial("Ready").
		State("Ready", func(context.Context, *Request[*benchObject]) Result { return Done() }, Final())
	if err := m.Build(); err != nil {
		tb.Fatal(err)
	}
	r, err := newReconciler(m, c, c, nopRecorder{})
	if err != nil {
		tb.Fatal(err)
	}
	return c, r
}

// cachedClient writes through a fake client and reads the object that
// cache stored there, as a manager's client reads its informer's cache:
// a deep copy, no decoding. The fake client's own Get encodes and decodes
// the object in JSON, which cost about six times the rest of a converged
// reconcile, kfsm's or the hand-written one's alike.
type cachedClient struct {
	client.Client
	stored *benchObject
	// unwatched is a namespace that the cache does not hold: a Get of an
	// object there fails, as a manager's cache of some namespaces does.
	unwatched string
}

func (c *cachedClient) cache(b *testing.B) {
	c.stored = &benchObject{}
	if err := c.Client.Get(context.Background(), benchRequest.NamespacedName, c.stored); err != nil {
		b.Fatal(err)
	}
}

func (c *cachedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if c.unwatched != "" && key.Namespace == c.unwatched {
		return fmt.Errorf("unable to get: %v because of unknown namespace for the cache", key)
	}
	o, ok := obj.(*benchObject)
	if c.stored == nil || !ok || key != benchRequest.NamespacedName {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	*o = *c.stored.DeepCopyObject().(*benchObject)
	return nil
}

// wroteNothing fails b if the stored object changed since it was cached.
func (c *cachedClient) wroteNothing(b *testing.B, who string) {
	var o benchObject
	if err := c.Client.Get(context.Background(), benchRequest.NamespacedName, &o); err != nil || o.ResourceVersion != c.stored.ResourceVersion {
		b.Fatalf("%s wrote the converged object again (resourceVersion %s, was %s, error %v)", who, o.ResourceVersion, c.stored.ResourceVersion, err)
	}
}

var benchRequest = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "o"}}

// BenchmarkConvergedReconcile is a whole reconcile of an object that has
// nothing left to do, read from a cache: what every resync costs.
func BenchmarkConvergedReconcile(b *testing.B) {
	c, r := convergedObject(b)
	ctx := logr.NewContext(context.Background(), logr.Discard())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Reconcile(ctx, benchRequest); err != nil {
			b.Fatal(err)
		}
	}
	c.wroteNothing(b, "kfsm")
}

// BenchmarkHandWrittenConvergedReconcile is what a plain controller-runtime
// reconciler does for the same stored object (a state, a Ready condition,
// one history entry): read it, see that the status needs no change, write
// nothing. BenchmarkConvergedReconcile's excess over it is kfsm's cost.
func BenchmarkHandWrittenConvergedReconcile(b *testing.B) {
	c, _ := convergedObject(b)
	ready := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonDone, Message: "state Ready is done"}
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var o benchObject
		if err := c.Get(ctx, req.NamespacedName, &o); err != nil {
			return reconcile.Result{}, err
		}
		before := o.Status.DeepCopy()
		o.Status.ObservedGeneration = o.Generation
		meta.SetStatusCondition(&o.Status.Conditions, ready)
		if !equality.Semantic.DeepEqual(before, &o.Status) {
			return reconcile.Result{}, c.Status().Update(ctx, &o)
		}
		return reconcile.Result{}, nil
	})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Reconcile(ctx, benchRequest); err != nil {
			b.Fatal(err)
		}
	}
	c.wroteNothing(b, "the hand-written reconciler")
}

// benchClient is a fake client that stores one benchObject, ns/o, with
// its status subresource.
func benchClient() client.Client {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(benchGVK, &benchObject{})
	scheme.AddKnownTypeWithName(benchGVK.GroupVersion().WithKind("BenchObjectList"), &benchObjectList{})
	obj := &benchObject{ObjectMeta: metav1.ObjectMeta{Name: "o", Namespace: "ns"}}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj).WithStatusSubresource(obj).Build()
}
