package fsm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// A machine that watches its own kind to wake other objects (the moose
// herd wakes a moose's friends) must see kfsm's own status writes there:
// they are no news for the object written, but they are for the others.
func TestOwnWritesReachWatchesOfTheMachinesKind(t *testing.T) {
	e := fsmtest.New(t)
	e.Timeout = 10 * time.Second
	m := fsm.New[*v1alpha1.Gadget]("wakes-others", fsm.Lifecycle).
		Initial("Waiting").
		State("Waiting", func(ctx context.Context, r *request) fsm.Result {
			if r.Object.Name == "leader" {
				if r.Object.Spec.Mode != "go" {
					return fsm.Wait(0, "Resting")
				}
				r.Object.Status.Note = "ready" // in kfsm's status write
				return fsm.Done()
			}
			var leader v1alpha1.Gadget
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Object.Namespace, Name: "leader"}, &leader); err != nil {
				return fsm.Fail(err)
			}
			if leader.Status.Note != "ready" {
				return fsm.Wait(0, "Following")
			}
			r.Object.Status.Note = "saw the leader ready"
			return fsm.Done()
		}, fsm.To("Waiting")).
		// A leader's change wakes the follower.
		Watches(&v1alpha1.Gadget{}, func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetName() != "leader" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: "follower"}}}
		})
	fsmtest.Run(e, m)
	leader := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "leader"}}
	follower := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "follower"}}
	e.Create(leader)
	e.Create(follower)
	e.AwaitCondition(follower, fsm.ConditionReconciling, metav1.ConditionTrue)

	e.Update(leader, func() { leader.Spec.Mode = "go" })
	e.Await("the follower to see the leader ready", func() bool {
		return e.Get(follower) && follower.Status.Note == "saw the leader ready"
	})
}

func TestOwnedAndWatchedObjectsTriggerReconciles(t *testing.T) {
	e := newEnv(t)
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: e.namespace, Name: name} }
	m := fsm.New[*gadget]("triggers", fsm.Lifecycle).
		Initial("Child").
		State("Child", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-child", Namespace: r.Object.Namespace}}
			if err := r.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm); apierrors.IsNotFound(err) {
				if err := ctrl.SetControllerReference(r.Object, cm, r.Client.Scheme()); err != nil {
					return fsm.Fail(err)
				}
				return failOr(r.Client.Create(ctx, cm), fsm.Wait(0, "WaitingForChild"))
			} else if err != nil {
				return fsm.Fail(err)
			}
			if cm.Data["ready"] != "yes" {
				return fsm.Wait(0, "WaitingForChild")
			}
			return fsm.Next("Referenced")
		}, fsm.To("Referenced")).
		State("Referenced", func(ctx context.Context, r *request) fsm.Result {
			var s corev1.Secret
			if err := r.Client.Get(ctx, key(r.Object.Spec.Mode), &s); err != nil {
				return fsm.Wait(0, "WaitingForSecret")
			}
			return fsm.Done()
		}, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Secret{}, func(_ context.Context, o client.Object) []ctrl.Request {
			return []ctrl.Request{{NamespacedName: key("g")}} // the gadget that names it
		})
	fsmtest.Run(e.fe, m)

	e.gadget("g", v1alpha1.GadgetSpec{Mode: "credentials"})
	var cm corev1.ConfigMap
	e.fe.Await("the child ConfigMap", func() bool { return e.direct.Get(t.Context(), key("g-child"), &cm) == nil })
	cm.Data = map[string]string{"ready": "yes"}
	if err := e.direct.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the child's change to move the gadget on", func() bool { return e.get("g").Status.State == "Referenced" })
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "credentials", Namespace: e.namespace}}
	if err := e.direct.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the secret to make the gadget Ready", func() bool {
		return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionReady)
	})
}

// The README's tutorial, as written, under a manager: with nothing
// changing outside, an open door costs its finalizer and one status write.
func TestUnderManagerTheTutorialDoorIsQuiet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := run(e, tutorial())
	door := &Door{ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: e.namespace}, Spec: v1alpha1.DoorSpec{Open: true}}
	if err := e.direct.Create(t.Context(), door); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the door to be open", func() bool {
		return e.direct.Get(t.Context(), client.ObjectKeyFromObject(door), door) == nil && door.Status.State == "Open"
	})
	time.Sleep(10 * time.Second) // and nothing after
	if err := e.direct.Get(t.Context(), client.ObjectKeyFromObject(door), door); err != nil {
		t.Fatal(err)
	}
	t.Logf("the open door, 10 s: %d writes", l.writes.Load())
	if n := l.writes.Load(); n > 2 {
		t.Errorf("the open door made %d writes in 10 s, want at most 2 (its finalizer and its status)", n)
	}
	if door.Status.State != "Open" || door.Status.Opened != 1 {
		t.Errorf("state %s, opened %d; want Open, 1", door.Status.State, door.Status.Opened)
	}
}

// kfsm's own writes never drive its loop: a handler that changes the
// status on every run (the tutorial's first version counted runs this
// way) runs once and writes once, then waits for a change from outside.
func TestUnderManagerAHandlerThatWritesOnEveryRunDoesNotLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	m := fsm.New[*Door]("door-counting-runs", fsm.Lifecycle).
		Initial("Open").
		State("Open", func(_ context.Context, r *fsm.Request[*Door]) fsm.Result {
			calls.mu.Lock()
			calls.at = append(calls.at, time.Now())
			calls.mu.Unlock()
			r.Object.Status.Opened++
			return fsm.Wait(0, "HeldOpen")
		}, fsm.To("Closed")).
		State("Closed", nil, fsm.Final())
	l := run(e, m)
	door := &Door{ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: e.namespace}, Spec: v1alpha1.DoorSpec{Open: true}}
	if err := e.direct.Create(t.Context(), door); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the first run's write", func() bool { return l.writes.Load() > 0 })
	time.Sleep(10 * time.Second) // and nothing after
	t.Logf("writing on every run, 10 s: %d handler runs, %d writes", calls.count(), l.writes.Load())
	if calls.count() != 1 || l.writes.Load() != 1 {
		t.Errorf("in 10 s with nothing changing outside: %d handler runs and %d writes, want 1 and 1", calls.count(), l.writes.Load())
	}
	if err := e.direct.Get(t.Context(), client.ObjectKeyFromObject(door), door); err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataLabel(&door.ObjectMeta, "painted", "red")
	if err := e.direct.Update(t.Context(), door); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the run for the change", func() bool { return l.writes.Load() > 1 })
	time.Sleep(2 * time.Second) // and nothing after
	if calls.count() != 2 || l.writes.Load() != 2 {
		t.Errorf("after a change from outside: %d handler runs and %d writes in all, want 2 and 2", calls.count(), l.writes.Load())
	}
}

// Guarantee 3: a converged object costs no write and no event, however
// often it is reconciled: here the cache resyncs every second and the
// machine looks again every second.
func TestUnderManagerAConvergedObjectIsQuiet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var calls runs
	m := fsm.New[*gadget]("converged", fsm.Lifecycle).
		Tune(fsm.Tuning{Resync: time.Second}).
		Initial("Start").
		State("Start", next("Running"), fsm.To("Running")).
		State("Running", counted(&calls, done), fsm.Final())
	l := run(e, m, withResync(time.Second))
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(time.Second) // the events of the walk reach the server
	writes, events, runs := l.writes.Load(), len(e.apiEvents()), calls.count()

	time.Sleep(10 * time.Second)
	t.Logf("converged, 10 s: %d writes, %d events, %d handler runs", l.writes.Load()-writes, len(e.apiEvents())-events, calls.count()-runs)
	if n := l.writes.Load() - writes; n != 0 {
		t.Errorf("a converged object made %d writes in 10 s, want 0", n)
	}
	if n := len(e.apiEvents()) - events; n != 0 {
		t.Errorf("a converged object got %d events in 10 s, want 0", n)
	}
	if n := calls.count() - runs; n < 5 {
		t.Errorf("the converged handler ran %d times in 10 s; the resyncs should have run it at least 5 times", n)
	}
}

// Guarantee 10 and kfsm's own writes: applying children does not drive
// the loop, each state of the pass runs once; a child changed by hand is
// put right at once.
func TestUnderManagerChildrenDoNotDriveTheLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var configs runs
	m := fsm.New[*gadget]("web-quiet", fsm.Pipeline).
		Initial("Config").
		State("Config", counted(&configs, func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-config"}, Data: map[string]string{"target": "1"}}
			return failOr(r.Apply(ctx, cm), fsm.Next("Expose"))
		}), fsm.To("Expose")).
		State("Expose", func(ctx context.Context, r *request) fsm.Result {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": r.Object.Name}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
			return failOr(r.Apply(ctx, svc), fsm.Next("Serving"))
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{})
	run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	time.Sleep(5 * time.Second)
	t.Logf("children applied, 5 s: the pass ran %d times", configs.count())
	if n := configs.count(); n != 1 {
		t.Errorf("the pass ran %d times in 5 s, want 1: kfsm's own applies and status write are no news", n)
	}

	var cm corev1.ConfigMap
	if err := e.direct.Get(t.Context(), e.key("g-config"), &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["target"] = "edited"
	if err := e.direct.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	e.fe.Await("the ConfigMap put right", func() bool {
		return e.direct.Get(t.Context(), e.key("g-config"), &cm) == nil && cm.Data["target"] == "1"
	})
	// At once is a moment on a quiet machine, and seconds on a loaded one;
	// the manager's resync would take hours.
	if took := time.Since(edited); took > 5*time.Second {
		t.Errorf("a child changed by hand was put right after %v, want at once", took)
	}
	time.Sleep(3 * time.Second)
	if n := configs.count(); n != 2 {
		t.Errorf("the pass ran %d times in all, want 2: once more for the edit", n)
	}
}

// A cluster-scoped child whose parent lives where this manager does not
// look is someone else's: no reconcile, no error.
func TestUnderManagerAForeignChildIsIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := fsm.New[*gadget]("foreign-child", fsm.Lifecycle).
		Initial("Start").
		State("Start", done, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final()).
		Owns(&rbacv1.ClusterRole{})
	l := run(e, m)
	foreign := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{
		Name:        e.namespace + "-foreign",
		Labels:      map[string]string{fsm.LabelMachine: "foreign-child", fsm.LabelOwnerUID: "0b5b0e0e-1111-2222-3333-444455556666", fsm.LabelManagedBy: "kfsm"},
		Annotations: map[string]string{fsm.AnnotationOwner: "another-install/g"},
	}}
	if err := e.direct.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.direct.Delete(context.Background(), foreign) })
	for i := range 5 {
		metav1.SetMetaDataLabel(&foreign.ObjectMeta, "touched", fmt.Sprint(i))
		if err := e.direct.Update(t.Context(), foreign); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	for _, line := range l.logs.errors() {
		t.Errorf("error logged about another install's child: %s", line)
	}
}
