package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// namespaceMachine is a pipeline that applies the namespace that the
// gadget's mode names, adopting it when the target is 1.
func namespaceMachine(name string) *fsm.Machine[*gadget] {
	return fsm.New[*gadget](name, fsm.Pipeline).
		Initial("Namespace").
		State("Namespace", func(ctx context.Context, r *request) fsm.Result {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Spec.Mode, Labels: map[string]string{"team": "web"}}}
			var opts []fsm.ApplyOption
			if r.Object.Spec.Target == 1 {
				opts = append(opts, fsm.Adopt())
			}
			return failOr(r.Apply(ctx, ns, opts...), fsm.Next("Serving"))
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final()).
		Owns(&corev1.Namespace{})
}

// namespaceWithData creates a namespace, as someone did by hand, with a
// ConfigMap of data in it.
func (e *env) namespaceWithData(name string) {
	e.t.Helper()
	if err := e.direct.Create(e.t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		e.t.Fatal(err)
	}
	data := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: name}, Data: map[string]string{"orders": "42"}}
	if err := e.direct.Create(e.t.Context(), data); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deleteAndWait(name string) {
	e.t.Helper()
	if err := e.direct.Delete(e.t.Context(), e.get(name)); err != nil {
		e.t.Fatal(err)
	}
	e.fe.Await(name+" to be gone", func() bool {
		return apierrors.IsNotFound(e.direct.Get(e.t.Context(), e.key(name), &gadget{}))
	})
}

// Guarantee 10: Apply never takes over an object that kfsm did not create.
// It refuses, with a reason and a message that say how to adopt; deleting
// the parent leaves the object and its data.
func TestUnderManagerApplyRefusesAnObjectItDidNotCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	theirs := e.namespace + "-theirs"
	e.namespaceWithData(theirs)
	run(e, namespaceMachine("no-adopt"))
	e.gadget("g", v1alpha1.GadgetSpec{Mode: theirs})
	e.fe.Await("the refusal", func() bool {
		c := condition(e.get("g"), fsm.ConditionReady)
		return c != nil && c.Reason == fsm.ReasonAlreadyExists
	})
	msg := condition(e.get("g"), fsm.ConditionReady).Message
	if !strings.Contains(msg, "Namespace "+theirs) || !strings.Contains(msg, "fsm.Adopt()") {
		t.Errorf("Ready message %q does not name the namespace and say how to adopt it", msg)
	}
	var ns corev1.Namespace
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: theirs}, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[fsm.LabelOwnerUID] != "" || ns.Labels["team"] != "" {
		t.Errorf("the refused namespace was written: labels %v", ns.Labels)
	}
	// The event writer writes apart from the status: the Event may come
	// after the condition.
	e.fe.Await("an AlreadyExists event that names the namespace as related", func() bool {
		for _, ev := range e.apiEvents() {
			if ev.Reason == fsm.ReasonAlreadyExists && ev.Related != nil && ev.Related.Kind == "Namespace" && ev.Related.Name == theirs {
				return true
			}
		}
		return false
	})

	e.deleteAndWait("g")
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: "data", Namespace: theirs}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("after the parent went, the data in the namespace is: %v", err)
	}
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: theirs}, &ns); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("after the parent went, the namespace is %v (deleting: %v)", err, ns.DeletionTimestamp)
	}
}

// With fsm.Adopt, Apply takes the object over as documented: kfsm's
// labels, no owner reference, Adopted in the status; when the parent
// goes, the object is released, not deleted.
func TestUnderManagerAdoptTakesOverAndReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	theirs := e.namespace + "-adopted"
	e.namespaceWithData(theirs)
	run(e, namespaceMachine("adopt"))
	g := e.gadget("g", v1alpha1.GadgetSpec{Mode: theirs, Target: 1})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })

	var ns corev1.Namespace
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: theirs}, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[fsm.LabelOwnerUID] != string(g.UID) || ns.Annotations[fsm.AnnotationAdopted] != "true" || ns.Labels["team"] != "web" {
		t.Errorf("adopted namespace: labels %v, annotations %v", ns.Labels, ns.Annotations)
	}
	if len(ns.OwnerReferences) != 0 {
		t.Errorf("adopted namespace has owner references %v; garbage collection would delete it", ns.OwnerReferences)
	}
	if outs := e.get("g").Status.Outputs; len(outs) != 1 || outs[0].Adopted == nil || !*outs[0].Adopted {
		t.Errorf("status.outputs = %+v, want the namespace, adopted", outs)
	}

	e.deleteAndWait("g")
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: theirs}, &ns); err != nil || ns.DeletionTimestamp != nil {
		t.Fatalf("after the parent went, the adopted namespace is %v (deleting: %v)", err, ns.DeletionTimestamp)
	}
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: "data", Namespace: theirs}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("after the parent went, the data in the adopted namespace is: %v", err)
	}
	for _, key := range []string{fsm.LabelOwnerUID, fsm.LabelMachine} {
		if _, ok := ns.Labels[key]; ok {
			t.Errorf("the released namespace still has label %s", key)
		}
	}
	if _, ok := ns.Annotations[fsm.AnnotationAdopted]; ok {
		t.Error("the released namespace is still annotated as adopted")
	}
}

// Guarantee 3 with children: a converged object costs no API request on
// a resync or a restart, because kfsm does not send an apply when the
// child is still the version that its last apply of the same content
// made. Drift is still put right: a child edited by hand is restored, a
// child deleted by hand is made again, and another applier's claim is a
// conflict. All of it holds with fsm.LeanCache's cache too, which keeps
// no managed fields.
func TestUnderManagerAConvergedObjectWithChildrenMakesNoRequests(t *testing.T) {
	t.Parallel()
	for name, lean := range map[string]bool{"Cache": false, "LeanCache": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			convergedObjectWithChildrenMakesNoRequests(t, lean)
		})
	}
}

func convergedObjectWithChildrenMakesNoRequests(t *testing.T, lean bool) {
	e := newEnv(t)
	opts := []func(*live){withResync(time.Second)}
	if lean {
		opts = append(opts, withLeanCache())
	}
	l := runFunc(e, func(*fsmtest.Env) *fsm.Machine[*gadget] { return webMachine("web-quiet") }, opts...)
	g := e.gadget("g", v1alpha1.GadgetSpec{Mode: "expose"})
	e.fe.AwaitReady(g)
	var cached corev1.ConfigMap
	if err := l.cached(t.Context(), client.ObjectKey{Namespace: e.namespace, Name: "g-config"}, &cached); err != nil {
		t.Fatal(err)
	}
	if kept := len(cached.ManagedFields) > 0; kept == lean {
		t.Errorf("the cache holds the child with %d managed fields entries; LeanCache: %v", len(cached.ManagedFields), lean)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g-config", Namespace: e.namespace}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.namespace}}
	requests := func() string {
		var counts []string
		for _, o := range []client.Object{g, cm, svc} {
			counts = append(counts, fmt.Sprintf("%T %s: %d writes, %d reads", o, o.GetName(), e.fe.Writes(o).Total(), e.fe.Reads(o)))
		}
		return strings.Join(counts, "; ")
	}
	walked := func(more int) {
		t.Helper()
		n := len(e.fe.Walks(g))
		e.fe.Await(fmt.Sprintf("%d more walks of the gadget", more), func() bool { return len(e.fe.Walks(g)) >= n+more })
	}
	walked(1) // the echoes have come back
	converged, events := requests(), len(e.fe.Events(g))

	walked(3) // the cache's resyncs
	if got := requests(); got != converged {
		t.Errorf("resyncs of a converged object made requests:\n got  %s\n want %s", got, converged)
	}
	l.op.Restart()
	walked(2)
	if got := requests(); got != converged {
		t.Errorf("a restart over a converged object made requests:\n got  %s\n want %s", got, converged)
	}
	if n := len(e.fe.Events(g)) - events; n != 0 {
		t.Errorf("a converged object got %d more events", n)
	}

	e.fe.Update(cm, func() { cm.Data["target"] = "edited by hand" })
	e.fe.Await("the edited ConfigMap to be restored", func() bool {
		return e.fe.Get(cm) && cm.Data["target"] == "0"
	})
	e.fe.Get(svc)
	uid := svc.UID
	e.fe.Delete(svc)
	e.fe.Await("the deleted Service to be made again", func() bool {
		return e.fe.Get(svc) && svc.UID != uid
	})
	fat := 0
	for _, line := range l.logs.all() {
		if strings.Contains(line.msg, "fsm.LeanCache") {
			fat++
		}
	}
	// One a process: the first, and the one after the restart.
	if want := map[bool]int{false: 2, true: 0}[lean]; fat != want {
		t.Errorf("%d log lines say that the cache keeps managed fields, want %d", fat, want)
	}

	claim := corev1ac.ConfigMap(cm.Name, e.namespace).WithData(map[string]string{"target": "99"})
	if err := e.direct.Apply(t.Context(), claim, client.FieldOwner("team-b"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the other applier's claim to be reported", func() bool {
		c := meta.FindStatusCondition(e.get("g").Status.Conditions, fsm.ConditionReady)
		return c != nil && c.Reason == fsm.ReasonApplyConflict && strings.Contains(c.Message, "team-b")
	})
}

// An apply that changes nothing answers with the version that someone
// else's last write made. When the cache has not seen that write yet,
// its watch event is still to come, and it is news: a handler that
// waits for a child's change must be woken by it.
func TestUnderManagerAChangeByOthersIsNotTakenForAnApplysEcho(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var approvals runs
	m := fsm.New[*gadget]("approval", fsm.Pipeline).
		Initial("Config").
		State("Config", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g-config"}, Data: map[string]string{"mode": "web"}}
			return failOr(r.Apply(ctx, cm), fsm.Next("Approval"))
		}, fsm.To("Approval")).
		State("Approval", counted(&approvals, func(ctx context.Context, r *request) fsm.Result {
			var cm corev1.ConfigMap
			if err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Object.Namespace, Name: "g-config"}, &cm); client.IgnoreNotFound(err) != nil {
				return fsm.Fail(err)
			}
			if cm.Annotations["approved"] != "yes" {
				return fsm.Wait(0, "AwaitingApproval")
			}
			return fsm.Next("Serving")
		}), fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	gate := &watchGate{resource: "configmaps"}
	l := run(e, m, withWatchGate(gate))
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to await approval", func() bool { return e.get("g").Status.State == "Approval" })

	annotate := func(obj client.Object, key, value string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
		if err := e.direct.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	g, cm := e.get("g"), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g-config", Namespace: e.namespace}}
	annotate(g, fsm.AnnotationPaused, "true")
	e.fe.Await("the Paused condition", func() bool {
		return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionPaused)
	})
	// Someone else changes the child twice; the cache sees only the first.
	annotate(cm, "approved", "no")
	e.fe.Await("the cache to see the first change", func() bool {
		var seen corev1.ConfigMap
		return l.cached(t.Context(), client.ObjectKeyFromObject(cm), &seen) == nil && seen.Annotations["approved"] == "no"
	})
	gate.hold()
	held := true
	defer func() {
		if held {
			gate.release()
		}
	}()
	annotate(cm, "approved", "yes")

	// Unpaused, the walk applies the ConfigMap (its version is not the
	// one kfsm's apply left), which changes nothing, and waits.
	runs := approvals.count()
	annotate(g, fsm.AnnotationPaused, "false")
	e.fe.Await("the handler to run on the cache's copy", func() bool { return approvals.count() > runs })
	gate.release()
	held = false
	e.fe.Await("the approval to wake the gadget", func() bool { return e.get("g").Status.State == "Serving" })
}

func TestConvergedParentWithChildrenChangesNothing(t *testing.T) {
	e := newEnv(t)
	r := e.reconciler(webMachine("web-converged"))
	e.gadget("g", v1alpha1.GadgetSpec{Target: 1, Mode: "expose"})
	e.reconcile(r, "g")
	if !meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionReady) {
		t.Fatalf("not Ready after one reconcile: %+v", e.get("g").Status.Conditions)
	}

	versions := func() []string {
		var cm corev1.ConfigMap
		var svc corev1.Service
		e.exists(&cm, "g-config")
		e.exists(&svc, "g")
		return []string{e.get("g").ResourceVersion, cm.ResourceVersion, svc.ResourceVersion}
	}
	before, writes := versions(), e.writes.Load()
	for range 3 {
		e.reconcile(r, "g")
	}
	if diff := cmp.Diff(before, versions()); diff != "" {
		t.Errorf("reconciling a converged parent changed resource versions (gadget, ConfigMap, Service) (-before +after):\n%s", diff)
	}
	if n := e.writes.Load() - writes; n != 0 {
		t.Errorf("reconciling a converged parent made %d writes besides applies, want 0", n)
	}
}

func TestFieldConflictIsReportedAndForcedOnRequest(t *testing.T) {
	e := newEnv(t)
	r := e.reconciler(webMachine("web-conflict"))
	e.gadget("g", v1alpha1.GadgetSpec{Mode: "expose"})
	e.reconcile(r, "g")

	// Another team's tool takes the Service's selector over.
	theirs := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "theirs"},
			Ports:    []corev1.ServicePort{{Name: "web", Port: 8080}},
		},
	}
	if err := e.direct.Patch(t.Context(), theirs, client.Apply, client.FieldOwner("other-team"), client.ForceOwnership); err != nil { //nolint:staticcheck // the plainest way to be another field manager
		t.Fatal(err)
	}

	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 1 })
	if f := e.fail(r); f.State != "Expose" {
		t.Errorf("the failure is in state %s, want Expose", f.State)
	}
	g := e.get("g")
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, fsm.ReasonApplyConflict)
	if msg := condition(g, fsm.ConditionReady).Message; !strings.Contains(msg, `"other-team"`) || !strings.Contains(msg, ".spec.selector") {
		t.Errorf("Ready message %q does not name the manager other-team and the field", msg)
	}
	var svc corev1.Service
	if e.exists(&svc, "g"); svc.Spec.Selector["app"] != "theirs" {
		t.Errorf("the Service's selector is %v, want theirs untouched", svc.Spec.Selector)
	}

	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "force" })
	e.reconcile(r, "g")
	wantCondition(t, e.get("g"), fsm.ConditionReady, metav1.ConditionTrue, fsm.ReasonDone)
	if e.exists(&svc, "g"); svc.Spec.Selector["app"] != "g" {
		t.Errorf("the forced Service's selector is %v, want app=g", svc.Spec.Selector)
	}
}

// A child's name that another parent's child has is refused, and the
// error names that parent, which the child's owner reference leads to.
func TestApplyRefusesAnotherParentsChildAndNamesTheParent(t *testing.T) {
	e := newEnv(t)
	shared := func(ctx context.Context, r *request) fsm.Result {
		err := r.Apply(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "shared"}})
		if err != nil {
			return fsm.Fail(err)
		}
		return fsm.Done()
	}
	m := fsm.New[*gadget]("shared-child", fsm.Pipeline).
		Initial("Apply").
		State("Apply", shared, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	r := e.reconciler(m)
	e.gadget("first", v1alpha1.GadgetSpec{})
	e.reconcile(r, "first")
	if !e.exists(&corev1.ConfigMap{}, "shared") {
		t.Fatal("the first parent's child was not applied")
	}
	e.gadget("g", v1alpha1.GadgetSpec{})
	err := error(e.fail(r))
	var exists *fsm.AlreadyExistsError
	if !errors.As(err, &exists) {
		t.Fatalf("the second parent's apply failed with %v, want an AlreadyExistsError", err)
	}
	if want := e.namespace + "/first"; exists.Owner != want {
		t.Errorf("the error names the owner %q, want %q", exists.Owner, want)
	}
	if !strings.Contains(err.Error(), "belongs to another parent, "+e.namespace+"/first") {
		t.Errorf("the error %q does not name the parent", err)
	}
}

func TestGarbageCollectionDeletesOwnedChildren(t *testing.T) {
	e := newEnv(t)
	fsmtest.Run(e.fe, webMachine("web-gc"))
	e.gadget("g", v1alpha1.GadgetSpec{Mode: "expose"})
	e.fe.Await("the children", func() bool { return e.exists(&corev1.Service{}, "g") })

	// No deletion path: the garbage collector of kube-controller-manager
	// removes what the owner references point at.
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("garbage collection", func() bool {
		return !e.exists(&corev1.Service{}, "g") && !e.exists(&corev1.ConfigMap{}, "g-config")
	})
}

func TestClusterScopedChildNeedsADeletionPath(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("cluster-child-no-cleanup", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			return failOr(r.Apply(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Namespace + "-orphan"}}), fsm.Done())
		}, fsm.Final()).
		Owns(&rbacv1.ClusterRole{})
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	if f := e.fail(r); !strings.Contains(f.Error(), "declare OnDelete") {
		t.Errorf("failure %v does not say that an OnDelete state is needed", f)
	}
	if msg := condition(e.get("g"), fsm.ConditionReady).Message; !strings.Contains(msg, "declare OnDelete") {
		t.Errorf("Ready message %q does not say that an OnDelete state is needed", msg)
	}
	err := e.direct.Get(t.Context(), client.ObjectKey{Name: e.namespace + "-orphan"}, &rbacv1.ClusterRole{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a child that nothing would delete was written: %v", err)
	}
}

// AdoptAndDelete makes an existing object a child like those kfsm
// creates: owned, and pruned when no longer desired.
func TestAdoptAndDeleteMakesAnExistingObjectAChild(t *testing.T) {
	e := newEnv(t)
	m := fsm.New[*gadget]("adopt-and-delete", fsm.Pipeline).
		Initial("Config").
		State("Config", func(ctx context.Context, r *request) fsm.Result {
			if r.Object.Spec.Mode == "drop" {
				return fsm.Next("Serving")
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"level": "2"}}
			return failOr(r.Apply(ctx, cm, fsm.AdoptAndDelete()), fsm.Next("Serving"))
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	r := e.reconciler(m)
	existing := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: e.namespace}, Data: map[string]string{"level": "1"}}
	if err := e.direct.Create(t.Context(), existing); err != nil {
		t.Fatal(err)
	}
	g := e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")

	var cm corev1.ConfigMap
	if !e.exists(&cm, "settings") {
		t.Fatal("the adopted ConfigMap is gone")
	}
	if owner := metav1.GetControllerOf(&cm); owner == nil || owner.UID != g.UID || cm.Data["level"] != "2" || cm.Annotations[fsm.AnnotationAdopted] != "" {
		t.Errorf("adopted ConfigMap: controller %v, data %v, annotations %v; want the gadget, level 2, no adopted mark", owner, cm.Data, cm.Annotations)
	}
	if outs := e.get("g").Status.Outputs; len(outs) != 1 || outs[0].Adopted != nil {
		t.Errorf("status.outputs = %+v, want the ConfigMap as a plain child", outs)
	}
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "drop" })
	e.reconcile(r, "g")
	if e.exists(&corev1.ConfigMap{}, "settings") {
		t.Error("a child adopted with AdoptAndDelete was not pruned")
	}
}

// A new child costs one request: a create, which fails if an object of
// the name exists, rather than a read and an apply. Its fields are then
// kfsm's update; the first change of the child moves them to kfsm's
// apply, so that it changes the create's values without a conflict with
// itself and removes the fields that the handler no longer sets. The
// process that created the child knows that its create is the child's
// last write and moves them with one patch; another process learns it
// from the apply's conflict or answer, and applies again.
func TestUnderManagerANewChildCostsOneRequest(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		target  int32
		restart bool
		change  fsmtest.Writes // of the ConfigMap, for its first change
	}{
		"ChangeAndRemove":    {target: 2, change: fsmtest.Writes{Patch: 1, Apply: 1}},
		"RemoveOnly":         {target: 1, change: fsmtest.Writes{Patch: 1, Apply: 1}},
		"ChangeAfterRestart": {target: 2, restart: true, change: fsmtest.Writes{Patch: 1, Apply: 2}},
		"RemoveAfterRestart": {target: 1, restart: true, change: fsmtest.Writes{Patch: 1, Apply: 2}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			m := fsm.New[*gadget]("created", fsm.Pipeline).
				Initial("Config").
				State("Config", func(ctx context.Context, r *request) fsm.Result {
					cm := &corev1.ConfigMap{
						ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
						Data:       map[string]string{"target": fmt.Sprint(r.Object.Spec.Target)},
					}
					if r.Object.Spec.Mode == "extra" {
						cm.Labels = map[string]string{"extra": "yes"}
						cm.Data["extra"] = "1"
					}
					return failOr(r.Apply(ctx, cm), fsm.Next("Serving"))
				}, fsm.To("Serving")).
				State("Serving", done, fsm.Final()).
				Owns(&corev1.ConfigMap{})
			l := run(e, m, withLeanCache())
			g := e.gadget("g", v1alpha1.GadgetSpec{Mode: "extra", Target: 1})
			e.fe.AwaitReady(g)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.namespace}}
			if w, reads := e.fe.Writes(cm), e.fe.Reads(cm); w != (fsmtest.Writes{Create: 1}) || reads != 0 {
				t.Errorf("the new child cost %+v and %d reads, want 1 create and no read", w, reads)
			}

			if tc.restart {
				l.op.Restart()
			}
			e.update(func(s *v1alpha1.GadgetSpec) { s.Mode, s.Target = "", tc.target })
			e.fe.Await("the ConfigMap without the extra fields", func() bool {
				return e.fe.Get(cm) && cm.Labels["extra"] == "" && cm.Data["extra"] == "" && cm.Data["target"] == fmt.Sprint(tc.target)
			})
			if managedBy(cm, m.FieldOwner(), metav1.ManagedFieldsOperationUpdate) || !managedBy(cm, m.FieldOwner(), metav1.ManagedFieldsOperationApply) {
				t.Errorf("the changed child's fields are not all kfsm's apply: %v", cm.ManagedFields)
			}
			e.fe.AwaitReady(e.get("g"))
			want := tc.change
			want.Create = 1
			if w := e.fe.Writes(cm); w != want {
				t.Errorf("the child's writes, its first change included, are %+v, want %+v", w, want)
			}
			for _, line := range l.logs.all() {
				if strings.Contains(line.msg, "taking back") || line.level < 0 {
					t.Errorf("log line %q %v: kfsm's own create is not someone else's change", line.msg, line.kv)
				}
			}
		})
	}
}

// The first change of a child that kfsm created takes two requests: one
// that makes the create's record of the child's fields an apply's, and the
// apply. When the API server takes the first and its answer is lost (a
// timeout, or the fence of a sharded replica whose Lease renewal ran late
// cutting off a request it had sent), the apply fails as a write of
// unknown outcome does, and the run is tried again. Were it to go on, the
// version that the lost answer carried would come back as someone else's
// change and run the handler again once the object had converged.
func TestUnderManagerAChildsFirstChangeWithALostAnswerFailsTheApply(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var applied [3]atomic.Int32 // runs whose apply went through, by generation
	m := fsm.New[*gadget]("lost-answer", fsm.Pipeline).
		Initial("Config").
		State("Config", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
				Data:       map[string]string{"target": fmt.Sprint(r.Object.Spec.Target)},
			}
			if err := r.Apply(ctx, cm); err != nil {
				return fsm.Fail(err)
			}
			applied[min(r.Object.Generation, 2)].Add(1)
			return fsm.Next("Serving")
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	l := run(e, m)
	g := e.gadget("g", v1alpha1.GadgetSpec{Target: 1})
	e.fe.AwaitReady(g)

	lost := &fault{op: "patch", times: 1, landed: true, err: errors.New("the answer was lost (injected)"),
		match: func(o client.Object) bool { _, ok := o.(*corev1.ConfigMap); return ok }}
	l.inject(lost)
	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 2 })
	g = e.get("g")
	e.fe.AwaitReady(g)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: e.namespace}}
	if !e.fe.Get(cm) || cm.Data["target"] != "2" {
		t.Fatalf("the ConfigMap holds %v, want target 2", cm.Data)
	}
	awaitNoWalk(e, g, 2*time.Second)
	l.mu.Lock()
	left := lost.times
	l.mu.Unlock()
	if left != 0 {
		t.Fatal("no write of the ConfigMap met the lost answer")
	}
	if n := applied[2].Load(); n != 1 {
		t.Errorf("the handler's apply went through %d times on generation 2, want once: a lost answer is a failed write", n)
	}
	if w := e.fe.Writes(cm); w.Patch != 1 || w.Apply < 1 {
		t.Errorf("the child's writes are %+v, want the move of the create's record once, and the apply", w)
	}
	logged := slices.ContainsFunc(l.logs.all(), func(line logLine) bool {
		return line.err != nil && strings.Contains(line.err.Error(), "moving the fields") && errors.Is(line.err, lost.err)
	})
	if !logged {
		t.Error("no error was logged of the move whose answer was lost")
	}
}

// awaitNoWalk waits until the machine has not walked obj for d.
func awaitNoWalk(e *env, obj client.Object, d time.Duration) {
	e.t.Helper()
	walks, since := -1, time.Now()
	e.fe.Await(fmt.Sprintf("no walk of %s for %v", obj.GetName(), d), func() bool {
		if n := len(e.fe.Walks(obj)); n != walks {
			walks, since = n, time.Now()
		}
		return time.Since(since) >= d
	})
}

// An object of the child's name that the cache has yet to see makes the
// create fail; kfsm then reads it and refuses it as any other object it
// did not create, and writes nothing to it.
func TestAnObjectTheCacheHasNotSeenIsNotTakenOver(t *testing.T) {
	e := newEnv(t)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "g-config", Namespace: e.namespace, Labels: map[string]string{"team": "b"}}, Data: map[string]string{"target": "0"}}
	if err := e.direct.Create(t.Context(), theirs); err != nil {
		t.Fatal(err)
	}
	lagging := interceptor.NewClient(e.direct.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.ConfigMap); ok && key.Name == theirs.Name && len(opts) > 0 {
				// The cache's read, which kfsm makes with UnsafeDisableDeepCopy.
				return apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r, err := webMachine("web-lagging").Reconciler(lagging, e.events)
	if err != nil {
		t.Fatal(err)
	}
	e.gadget("g", v1alpha1.GadgetSpec{})
	_, err = r.Reconcile(t.Context(), reconcileRequest(e, "g"))
	if exists := (*fsm.AlreadyExistsError)(nil); !errors.As(err, &exists) {
		t.Fatalf("Reconcile() = %v, want an AlreadyExistsError", err)
	}
	var got corev1.ConfigMap
	if err := e.direct.Get(t.Context(), e.key(theirs.Name), &got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != theirs.ResourceVersion {
		t.Errorf("the object kfsm did not create was written: labels %v, owners %v", got.Labels, got.OwnerReferences)
	}
}

// A child declared unstructured, changed by a new spec, costs one apply
// and is recorded as that apply left it: the status keeps the version
// the apply answered with, so a restart over it makes no request.
func TestUnderManagerAnUnstructuredChildsChangeIsRecordedAsApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	configMap := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		return u
	}
	l := runFunc(e, func(*fsmtest.Env) *fsm.Machine[*gadget] {
		return fsm.New[*gadget]("unstructured-child", fsm.Pipeline).
			Initial("Config").
			State("Config", func(ctx context.Context, r *request) fsm.Result {
				cm := configMap()
				cm.SetName(r.Object.Name + "-config")
				cm.Object["data"] = map[string]any{"target": fmt.Sprint(r.Object.Spec.Target)}
				return failOr(r.Apply(ctx, cm), fsm.Next("Done"))
			}, fsm.To("Done")).
			State("Done", done, fsm.Final()).
			Owns(configMap())
	}, withResync(time.Second))
	g := e.gadget("g", v1alpha1.GadgetSpec{Target: 1})
	e.fe.AwaitReady(g)
	e.update(func(s *v1alpha1.GadgetSpec) { s.Target = 2 })
	cm := configMap()
	cm.SetNamespace(e.namespace)
	cm.SetName("g-config")
	e.fe.Await("the child to hold the new target", func() bool {
		err := e.direct.Get(t.Context(), client.ObjectKeyFromObject(cm), cm)
		return err == nil && cm.Object["data"].(map[string]any)["target"] == "2" && e.get("g").Status.ObservedGeneration == 2
	})
	e.fe.AwaitReady(g)
	if w := e.fe.Writes(cm); w != (fsmtest.Writes{Create: 1, Patch: 1, Apply: 1}) {
		t.Errorf("the child's writes: %+v, want its create, the move of its fields to the apply, and one apply", w)
	}
	if out := e.get("g").Status.Outputs; len(out) != 1 || out[0].ResourceVersion != cm.GetResourceVersion() {
		t.Errorf("the status records %+v, want the child at resourceVersion %s", out, cm.GetResourceVersion())
	}
	n := len(e.fe.Walks(g))
	e.fe.Await("two resyncs", func() bool { return len(e.fe.Walks(g)) >= n+2 })
	l.op.Restart()
	n = len(e.fe.Walks(g))
	e.fe.Await("a walk after the restart", func() bool { return len(e.fe.Walks(g)) >= n+2 })
	if w := e.fe.Writes(cm); w != (fsmtest.Writes{Create: 1, Patch: 1, Apply: 1}) {
		t.Errorf("after resyncs and a restart, the child's writes: %+v, want its create, the move of its fields to the apply, and one apply", w)
	}
}
