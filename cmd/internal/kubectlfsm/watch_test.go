package kubectlfsm

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/examples/moose/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
)

// The transitions a watch prints are those a history gained since the
// copy it knew, told apart by the whole transition and its place, not by
// a time of seconds: a full history drops its oldest entries as it gains.
func TestAppendedAreTheTransitionsAHistoryGained(t *testing.T) {
	sec := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	move := func(from, to fsm.State) fsm.Transition {
		return fsm.Transition{From: from, To: to, Reason: "Next", Time: sec}
	}
	ab, ba, bc, ca := move("A", "B"), move("B", "A"), move("B", "C"), move("C", "A")
	ca.Time = metav1.NewTime(sec.Add(time.Second))
	for name, c := range map[string]struct {
		known, history, want []fsm.Transition
	}{
		"unchanged":                     {[]fsm.Transition{ab}, []fsm.Transition{ab}, nil},
		"one more in the same second":   {[]fsm.Transition{ab}, []fsm.Transition{ab, bc}, []fsm.Transition{bc}},
		"back and forth in one second":  {[]fsm.Transition{ab}, []fsm.Transition{ab, ba, ab}, []fsm.Transition{ba, ab}},
		"full: the oldest dropped":      {[]fsm.Transition{ab, ba, ab}, []fsm.Transition{ba, ab, bc}, []fsm.Transition{bc}},
		"full: two dropped, two gained": {[]fsm.Transition{ab, ba, ab}, []fsm.Transition{ab, bc, ca}, []fsm.Transition{bc, ca}},
		"nothing known":                 {nil, []fsm.Transition{ab, bc}, []fsm.Transition{ab, bc}},
		"nothing known survives":        {[]fsm.Transition{ba}, []fsm.Transition{ab, bc}, []fsm.Transition{ab, bc}},
	} {
		if got := appended(c.known, c.history); !cmp.Equal(got, c.want, cmpopts.EquateEmpty()) {
			t.Errorf("%s: appended = %v, want %v", name, got, c.want)
		}
	}
}

// A watch that the API server ends as expired (its version compacted
// away, as after a long quiet in a busy cluster) lists again and goes on:
// it prints what the objects gained meanwhile and which went.
func TestWatchGoesOnAfterItsVersionExpired(t *testing.T) {
	e := fsmtest.New(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	at := metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	for _, name := range []string{"moose-stays", "moose-goes"} {
		m := &v1alpha1.Moose{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.Namespace}, Spec: v1alpha1.MooseSpec{Weight: 400}}
		e.Create(m)
		m.Status.State, m.Status.History = "Roaming", []fsm.Transition{{To: "Roaming", Reason: "Created", Time: at}}
		if err := e.Client.Status().Update(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	dyn, err := dynamic.NewForConfig(e.Config())
	if err != nil {
		t.Fatal(err)
	}
	// Before the first watch, stays moves and goes is deleted; then that
	// watch ends at once, as the API server ends one whose version is too
	// old.
	meanwhile := func() {
		m := &v1alpha1.Moose{}
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: "moose-stays"}, m); err != nil {
			t.Error(err)
			return
		}
		m.Status.State = "Eating"
		m.Status.History = append(m.Status.History, fsm.Transition{From: "Roaming", To: "Eating", Reason: "Next", Time: at})
		if err := e.Client.Status().Update(ctx, m); err != nil {
			t.Error(err)
		}
		if err := e.Client.Delete(ctx, &v1alpha1.Moose{ObjectMeta: metav1.ObjectMeta{Name: "moose-goes", Namespace: e.Namespace}}); err != nil {
			t.Error(err)
		}
	}
	var out SyncBuffer
	done := make(chan error, 1)
	gvr := v1alpha1.GroupVersion.WithResource("moose")
	go func() {
		done <- watchTransitions(ctx, inspect.Cluster{Dynamic: &expiring{Interface: dyn, before: meanwhile}}, &inspect.Machine{GVR: gvr, Namespaced: true}, e.Namespace, &out)
	}()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && len(done) == 0; time.Sleep(50 * time.Millisecond) {
		if strings.Contains(out.String(), "Roaming → Eating") && strings.Contains(out.String(), "/moose-goes  deleted") {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch ended with %v", err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("watch printed %d lines, want 2:\n%s", n, out.String())
	}
}

// expiring is a dynamic client whose first watch ends at once as expired,
// as the API server ends one from a version it no longer holds, after
// calling before.
type expiring struct {
	dynamic.Interface
	before func()
	once   sync.Once
}

func (d *expiring) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return expiringResource{d.Interface.Resource(gvr), d}
}

type expiringResource struct {
	dynamic.NamespaceableResourceInterface
	d *expiring
}

func (r expiringResource) Namespace(ns string) dynamic.ResourceInterface {
	return expiringNamespace{r.NamespaceableResourceInterface.Namespace(ns), r.d}
}

type expiringNamespace struct {
	dynamic.ResourceInterface
	d *expiring
}

func (r expiringNamespace) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	expire := false
	r.d.once.Do(func() { expire = true })
	if !expire {
		return r.ResourceInterface.Watch(ctx, opts)
	}
	r.d.before()
	w := watch.NewRaceFreeFake()
	w.Error(&apierrors.NewResourceExpired("too old resource version: 1 (2)").ErrStatus)
	return w, nil
}

// SyncBuffer is a bytes.Buffer that a command writes while a test reads;
// the tests of package kubectlfsm_test use it too.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
