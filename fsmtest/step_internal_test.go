package fsmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The write that removes the finalizer comes after the walk's status
// write, and may race with another change: the reconcile then asks
// controller-runtime to run it again soon, with no error, and its Walk
// says Soon. The step driver, which schedules by the Walk, runs it again
// as a manager's queue does, rather than finding nothing due with the
// object still held by its finalizer.
func TestAStepRunsAgainWhenTheFinalizersRemovalRaced(t *testing.T) {
	t.Parallel()
	e := New(t)
	m := fsm.New[*v1alpha1.Gadget]("raced", fsm.Lifecycle).
		Initial("Ready").
		State("Ready", nil, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", nil, fsm.Final())
	s := Steps(e, m)
	// The driver's reconciler, through a client whose first patch of a
	// deleted gadget's metadata finds that someone labelled it a moment
	// before.
	var deleted, raced atomic.Bool
	cfg := e.operatorConfig(nil)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && !strings.HasSuffix(r.URL.Path, "/status") && deleted.Load() && raced.CompareAndSwap(false, true) {
				var g v1alpha1.Gadget
				if err := e.Client.Get(r.Context(), client.ObjectKey{Namespace: e.Namespace, Name: "g"}, &g); err != nil {
					return nil, err
				}
				g.Labels = map[string]string{"touched": "yes"}
				if err := e.Client.Update(r.Context(), &g); err != nil {
					return nil, err
				}
			}
			return rt.RoundTrip(r)
		})
	})
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if s.r, err = m.Reconciler(c, &recorder{e: e}); err != nil {
		t.Fatal(err)
	}

	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	e.Create(g)
	e.AwaitState(g, "Ready")
	e.Delete(g)
	deleted.Store(true)
	e.AwaitGone(g)
	if !raced.Load() {
		t.Error("the finalizer's removal never met the other change: the test tests nothing")
	}
}

// A patch that takes the last finalizer off a deleted object deletes it,
// but the API server answers with the object as it was before, at the
// version of the walk's status write: the test's reads within an Await,
// at that version from the API server's watch cache, find the object
// there until the cache has the deletion. Here the cache lags for every
// such read; the step driver must judge that nothing is due by what the
// API server holds, and see that the gadget is gone.
func TestAStepDriverSeesTheDeletionPastAWatchCacheThatLags(t *testing.T) {
	t.Parallel()
	e := New(t)
	var lagged atomic.Int32
	cfg := e.Config()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			floor := r.URL.Query().Get("resourceVersion")
			if err != nil || r.Method != http.MethodGet || floor == "" || resp.StatusCode != http.StatusNotFound {
				return resp, err
			}
			// The object as the API server held it at the version the
			// read asked for, as a cache that has not yet had the
			// deletion would answer.
			dir, name := path.Split(r.URL.Path)
			q := url.Values{"fieldSelector": {"metadata.name=" + name}, "resourceVersion": {floor}, "resourceVersionMatch": {"Exact"}}
			at := r.Clone(r.Context())
			at.URL.Path, at.URL.RawQuery = strings.TrimSuffix(dir, "/"), q.Encode()
			list, err := rt.RoundTrip(at)
			if err != nil || list.StatusCode != http.StatusOK {
				return resp, err
			}
			defer func() { _ = list.Body.Close() }()
			var items struct{ Items []json.RawMessage }
			if err := json.NewDecoder(list.Body).Decode(&items); err != nil || len(items.Items) == 0 {
				return resp, err
			}
			lagged.Add(1)
			_ = resp.Body.Close()
			resp.StatusCode, resp.Status = http.StatusOK, "200 OK"
			resp.Body = io.NopCloser(bytes.NewReader(items.Items[0]))
			resp.ContentLength = int64(len(items.Items[0]))
			return resp, nil
		})
	})
	var err error
	if e.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: e.Scheme, Mapper: e.Client.RESTMapper()}); err != nil {
		t.Fatal(err)
	}
	Steps(e, fsm.New[*v1alpha1.Gadget]("lagged", fsm.Lifecycle).
		Initial("Ready").
		State("Ready", nil, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", nil, fsm.Final()))

	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	e.Create(g)
	e.AwaitState(g, "Ready")
	e.Delete(g)
	e.AwaitGone(g)
	if lagged.Load() == 0 {
		t.Error("no read found the gadget past its deletion: the test tests nothing")
	}
}

// The operator's write that takes the last finalizer off answers with
// the object at the version before its deletion; a walk on that copy,
// which a lagging cache holds, would run the deletion path again. What
// the test knows the operator wrote is past that version, so that every
// test's check of its walks would catch one.
func TestTheDeletionPathRunsOnceThoughTheCacheLags(t *testing.T) {
	t.Parallel()
	e := New(t)
	var cleanups atomic.Int32
	m := fsm.New[*v1alpha1.Gadget]("lagging", fsm.Lifecycle).
		Initial("Ready").
		State("Ready", nil, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", func(context.Context, *fsm.Request[*v1alpha1.Gadget]) fsm.Result { cleanups.Add(1); return fsm.Done() }, fsm.Final())
	s := Steps(e, m)
	// The driver's reconciler, through a client that reads the gadget as
	// it was before the patch that deleted it.
	var before atomic.Pointer[v1alpha1.Gadget]
	c, err := client.NewWithWatch(e.operatorConfig(nil), client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	lagging := interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if old := before.Load(); old != nil {
				old.DeepCopyInto(obj.(*v1alpha1.Gadget))
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			var live v1alpha1.Gadget
			if err := e.Client.Get(ctx, client.ObjectKeyFromObject(obj), &live); err != nil {
				return err
			}
			if err := c.Patch(ctx, obj, patch, opts...); err != nil || live.DeletionTimestamp == nil {
				return err
			}
			before.Store(&live)
			return nil
		},
	})
	if s.r, err = m.Reconciler(lagging, &recorder{e: e}); err != nil {
		t.Fatal(err)
	}

	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g"}}
	e.Create(g)
	e.AwaitState(g, "Ready")
	e.Delete(g)
	s.Step(g)
	if before.Load() == nil || cleanups.Load() != 1 {
		t.Fatalf("the deletion path ran Cleanup %d times and made no patch of the deleted gadget: the test tests nothing", cleanups.Load())
	}
	if out := s.Step(g); cleanups.Load() != 1 {
		t.Errorf("a reconcile that read the copy from before the deletion ran Cleanup again (%v)", out)
	}
}
