package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// webMachine is a pipeline with two children: a ConfigMap always, and a
// Service while the gadget's mode is "expose" (or "force", which takes
// the Service's fields over from other managers).
func webMachine(name string) *fsm.Machine[*gadget] {
	return fsm.New[*gadget](name, fsm.Pipeline).
		Initial("Config").
		State("Config", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-config"},
				Data:       map[string]string{"target": strconv.Itoa(int(r.Object.Spec.Target))},
			}
			return failOr(r.Apply(ctx, cm), fsm.Next("Expose"))
		}, fsm.To("Expose")).
		State("Expose", func(ctx context.Context, r *request) fsm.Result {
			if r.Object.Spec.Mode != "expose" && r.Object.Spec.Mode != "force" {
				return fsm.Next("Serving")
			}
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name},
				Spec: corev1.ServiceSpec{
					Selector: map[string]string{"app": r.Object.Name},
					Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
				},
			}
			var opts []fsm.ApplyOption
			if r.Object.Spec.Mode == "force" {
				opts = append(opts, fsm.ForceOwnership())
			}
			return failOr(r.Apply(ctx, svc, opts...), fsm.Next("Serving"))
		}, fsm.To("Serving")).
		State("Serving", done, fsm.Final()).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{})
}

// ignoreServerFields compares output refs without what the server
// picks: their UIDs and versions, and digests that cover the parent's UID.
var ignoreServerFields = cmpopts.IgnoreFields(fsm.OutputRef{}, "UID", "AppliedDigest", "ResourceVersion")

func (e *env) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: e.namespace, Name: name}
}

// exists reports whether the named object of obj's type exists.
func (e *env) exists(obj client.Object, name string) bool {
	e.t.Helper()
	err := e.direct.Get(e.t.Context(), e.key(name), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	return err == nil
}

func TestPipelineAppliesChildrenAndPrunesTheUndesired(t *testing.T) {
	e := newEnv(t)
	fsmtest.Run(e.fe, webMachine("web"))

	e.gadget("g", v1alpha1.GadgetSpec{Target: 1, Mode: "expose"})
	e.fe.Await("the gadget to be Ready", func() bool { return meta.IsStatusConditionTrue(e.get("g").Status.Conditions, fsm.ConditionReady) })

	g := e.get("g")
	var cm corev1.ConfigMap
	var svc corev1.Service
	if !e.exists(&cm, "g-config") || !e.exists(&svc, "g") {
		t.Fatal("the ConfigMap and Service were not applied")
	}
	for _, child := range []client.Object{&cm, &svc} {
		if owner := metav1.GetControllerOf(child); owner == nil || owner.UID != g.UID {
			t.Errorf("%s has controller %v, want the gadget", child.GetName(), owner)
		}
		if got := child.GetLabels()["app.kubernetes.io/managed-by"]; got != "kfsm" {
			t.Errorf("%s has managed-by label %q, want kfsm", child.GetName(), got)
		}
		if !managedBy(child, "kfsm-web") {
			t.Errorf("%s has no fields applied by kfsm-web: %v", child.GetName(), child.GetManagedFields())
		}
		// The owner reference leads back to the parent; an annotation
		// saying so again would cost every child in the cache a map.
		if a := child.GetAnnotations(); len(a) != 0 {
			t.Errorf("%s, which has an owner reference, has annotations %v", child.GetName(), a)
		}
	}
	// The status is written under the machine's field manager too, so
	// that managed fields say who wrote it.
	statusBy := map[string]bool{}
	for _, f := range g.GetManagedFields() {
		if f.Subresource == "status" {
			statusBy[f.Manager] = true
		}
	}
	if !maps.Equal(statusBy, map[string]bool{"kfsm-web": true}) {
		t.Errorf("the status has fields of the managers %v, want kfsm-web alone", statusBy)
	}
	want := []fsm.OutputRef{
		{Kind: "ConfigMap", Namespace: e.namespace, Name: "g-config"},
		{Kind: "Service", Namespace: e.namespace, Name: "g"},
	}
	if diff := cmp.Diff(want, g.Status.Outputs, ignoreServerFields); diff != "" {
		t.Errorf("status.outputs (-want +got):\n%s", diff)
	}

	// Un-exposed: the Service goes, the ConfigMap stays.
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "" })
	e.fe.Await("the Service to be pruned", func() bool { return !e.exists(&corev1.Service{}, "g") })
	if !e.exists(&corev1.ConfigMap{}, "g-config") {
		t.Error("the ConfigMap, still desired, was deleted")
	}
	e.fe.Await("status.outputs to drop the Service", func() bool {
		return cmp.Equal(want[:1], e.get("g").Status.Outputs, ignoreServerFields)
	})

	// A child changed or deleted by hand is put back.
	cm.Data = map[string]string{"target": "99", "extra": "kept"}
	if err := e.direct.Update(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the ConfigMap to be restored", func() bool {
		var got corev1.ConfigMap
		return e.exists(&got, "g-config") && got.Data["target"] == "1"
	})
	if err := e.direct.Delete(t.Context(), &cm); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the ConfigMap to be created again", func() bool {
		var got corev1.ConfigMap
		return e.exists(&got, "g-config") && got.UID != cm.UID
	})
}

func managedBy(obj client.Object, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
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

func TestCrashBetweenApplyAndStatusWriteLeavesNoOrphan(t *testing.T) {
	e := newEnv(t)
	// The status write fails as if the process had died just before it.
	crashing := interceptor.NewClient(e.direct.(client.WithWatch), interceptor.Funcs{
		SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
			return errors.New("injected crash")
		},
	})
	before, err := webMachine("web-crash").Reconciler(crashing, e.events)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kept", "dropped"} {
		e.gadget(name, v1alpha1.GadgetSpec{Mode: "expose"})
		if _, err := before.Reconcile(t.Context(), reconcileRequest(e, name)); err == nil {
			t.Fatal("the injected crash did not fail the reconcile")
		}
		if !e.exists(&corev1.Service{}, name) || len(e.get(name).Status.Outputs) != 0 {
			t.Fatal("the crash should leave the Service applied and unrecorded")
		}
	}

	// After the restart, one gadget still wants its Service, the other no
	// longer does.
	g := e.get("dropped")
	g.Spec.Mode = ""
	if err := e.direct.Update(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	after := e.reconciler(webMachine("web-crash"))
	e.reconcile(after, "kept")
	e.reconcile(after, "dropped")

	if !e.exists(&corev1.Service{}, "kept") {
		t.Error("the Service still desired was deleted")
	}
	if got := e.get("kept").Status.Outputs; len(got) != 2 {
		t.Errorf("kept records %v, want its ConfigMap and Service", got)
	}
	if e.exists(&corev1.Service{}, "dropped") {
		t.Error("the Service no longer desired, applied before the crash, was left behind")
	}
	if got := e.get("dropped").Status.Outputs; len(got) != 1 || got[0].Kind != "ConfigMap" {
		t.Errorf("dropped records %v, want only its ConfigMap", got)
	}
}

func reconcileRequest(e *env, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: e.key(name)}
}

func TestUndeclaredChildTypeIsAnErrorAndNotWritten(t *testing.T) {
	e := newEnv(t)
	var applyErr error
	m := fsm.New[*gadget]("undeclared", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			applyErr = r.Apply(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}})
			return fsm.Done() // even a handler that ignores the error fails
		}, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	if f := e.fail(r); f.State != "Start" || f.RetryAfter <= 0 {
		t.Errorf("failure %+v, want state Start retried later", f)
	}

	var undeclared *fsm.UndeclaredOutputError
	if !errors.As(applyErr, &undeclared) || undeclared.Kind.Kind != "Secret" {
		t.Errorf("Apply() = %v, want an UndeclaredOutputError for Secret", applyErr)
	}
	g := e.get("g")
	wantCondition(t, g, fsm.ConditionReady, metav1.ConditionFalse, fsm.ReasonUndeclaredOutput)
	if msg := condition(g, fsm.ConditionReady).Message; !strings.Contains(msg, "does not own Secret") {
		t.Errorf("Ready message %q does not name the undeclared type", msg)
	}
	if e.exists(&corev1.Secret{}, "s") {
		t.Error("the undeclared Secret was written")
	}
}

func TestLifecyclePrunesWhatADoneStateNoLongerApplies(t *testing.T) {
	e := newEnv(t)
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	m := fsm.New[*gadget]("lifecycle-prune", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			return failOr(r.Apply(ctx, cm("from-start")), fsm.Next("Running"))
		}, fsm.To("Running")).
		State("Running", func(ctx context.Context, r *request) fsm.Result {
			if err := r.Apply(ctx, cm("always")); err != nil {
				return fsm.Fail(err)
			}
			if r.Object.Spec.Target == 0 {
				if err := r.Apply(ctx, cm("while-zero")); err != nil {
					return fsm.Fail(err)
				}
			}
			if r.Object.Spec.Mode == "wait" {
				return fsm.Wait(0, "Waiting") // not a complete answer: prunes nothing
			}
			return fsm.Done()
		}, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	r := e.reconciler(m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	for _, name := range []string{"from-start", "always", "while-zero"} {
		if !e.exists(&corev1.ConfigMap{}, name) {
			t.Fatalf("ConfigMap %s was not applied", name)
		}
	}
	if got := e.get("g").Status.Outputs; len(got) != 3 || got[1].State != "Start" {
		t.Errorf("status.outputs = %+v, want three children, from-start by Start", got)
	}

	e.update(func(s *v1alpha1.GadgetSpec) { s.Target, s.Mode = 1, "wait" })
	e.reconcile(r, "g")
	if !e.exists(&corev1.ConfigMap{}, "while-zero") {
		t.Error("a Wait pruned a child")
	}
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "" })
	e.reconcile(r, "g")
	if e.exists(&corev1.ConfigMap{}, "while-zero") {
		t.Error("Running's child that its Done run did not apply is still there")
	}
	if !e.exists(&corev1.ConfigMap{}, "from-start") || !e.exists(&corev1.ConfigMap{}, "always") {
		t.Error("a child still desired, or another state's, was pruned")
	}
	if !strings.Contains(strings.Join(e.events.reasons(), " "), fsm.ReasonPruned) {
		t.Errorf("no Pruned event among %v", e.events.reasons())
	}
}

func TestDeletingTheParentRemovesEveryChild(t *testing.T) {
	e := newEnv(t)
	var rules []rbacv1.PolicyRule
	role := func(r *request) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Namespace + "-" + r.Object.Name}, Rules: rules}
	}
	rules = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}
	withCleanup := fsm.New[*gadget]("cluster-child", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			if err := r.Apply(ctx, role(r)); err != nil {
				return fsm.Fail(err)
			}
			return failOr(r.Apply(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-owned"}}), fsm.Done())
		}, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final()).
		Owns(&rbacv1.ClusterRole{}).
		Owns(&corev1.ConfigMap{})
	fsmtest.Run(e.fe, withCleanup)

	e.gadget("g", v1alpha1.GadgetSpec{})
	name := e.namespace + "-g"
	e.fe.Await("the cluster-scoped child", func() bool {
		return e.direct.Get(t.Context(), client.ObjectKey{Name: name}, &rbacv1.ClusterRole{}) == nil
	})
	var cr rbacv1.ClusterRole
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: name}, &cr); err != nil {
		t.Fatal(err)
	}
	if len(cr.OwnerReferences) != 0 {
		t.Errorf("a cluster-scoped child has owner references %v", cr.OwnerReferences)
	}
	if got, want := cr.Annotations[fsm.AnnotationOwner], e.namespace+"/g"; got != want {
		t.Errorf("a child without an owner reference has %s %q, want %q", fsm.AnnotationOwner, got, want)
	}

	// A change to the child that no owner reference leads back from still
	// reconciles the parent, which puts it right.
	cr.Rules[0].Resources = []string{"secrets"}
	if err := e.direct.Update(t.Context(), &cr); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the parent to restore its child", func() bool {
		var got rbacv1.ClusterRole
		return e.direct.Get(t.Context(), client.ObjectKey{Name: name}, &got) == nil && cmp.Equal(got.Rules, rules)
	})

	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the parent to be gone", func() bool { return !e.exists(&gadget{}, "g") })
	if err := e.direct.Get(t.Context(), client.ObjectKey{Name: name}, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("the cluster-scoped child outlived its parent: %v", err)
	}
	if e.exists(&corev1.ConfigMap{}, "g-owned") {
		t.Error("the owned child outlived the deletion path")
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

func TestDeleteRemovesOnlyChildren(t *testing.T) {
	e := newEnv(t)
	var deleteErr error
	m := fsm.New[*gadget]("delete-child", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}
			if r.Object.Spec.Mode == "delete" {
				deleteErr = r.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-mine"}})
				return failOr(r.Delete(ctx, cm), fsm.Done())
			}
			return failOr(r.Apply(ctx, cm), fsm.Wait(0, "Applied"))
		}, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	r := e.reconciler(m)
	notMine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-mine", Namespace: e.namespace}}
	if err := e.direct.Create(t.Context(), notMine); err != nil {
		t.Fatal(err)
	}
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.reconcile(r, "g")
	if !e.exists(&corev1.ConfigMap{}, "mine") {
		t.Fatal("the child was not applied")
	}

	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "delete" })
	if f := e.fail(r); !strings.Contains(f.Error(), "not a child") { // the refused Delete fails the run; the other went through
		t.Errorf("failure %v does not name the refused Delete", f)
	}
	if e.exists(&corev1.ConfigMap{}, "mine") {
		t.Error("Delete left the child")
	}
	if got := e.get("g").Status.Outputs; len(got) != 0 {
		t.Errorf("status.outputs = %v after the delete, want none", got)
	}
	if deleteErr == nil || !strings.Contains(deleteErr.Error(), "not a child") {
		t.Errorf("Delete of an object kfsm did not apply = %v, want an error saying so", deleteErr)
	}
	if !e.exists(&corev1.ConfigMap{}, "not-mine") {
		t.Error("Delete removed an object that kfsm did not apply")
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

// Under a manager, a parent's children are read from the cache's index by
// parent, whether the cache holds some namespaces or all of them: no
// reconcile lists them by label, a list whose cost grows with the number
// of objects in the cache.
func TestUnderManagerChildrenAreFoundThroughTheIndex(t *testing.T) {
	for _, clusterWide := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster-wide=%v", clusterWide), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var byLabel atomic.Int32
			countLabelLists := func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if sel := (&client.ListOptions{}).ApplyOptions(opts).LabelSelector; sel != nil && strings.Contains(sel.String(), fsm.LabelOwnerUID) {
					byLabel.Add(1)
				}
				return c.List(ctx, list, opts...)
			}
			name := fmt.Sprintf("web-indexed-%v", clusterWide)
			fsmtest.Run(e.fe, webMachine(name), fsmtest.WithManagerOptions(func(o *ctrl.Options) {
				if clusterWide {
					// Children cached from all namespaces, but only this
					// test's, so that the operator leaves other tests be.
					mine := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{fsm.LabelMachine: name})}
					o.Cache.DefaultNamespaces = nil
					o.Cache.ByObject = map[client.Object]cache.ByObject{
						&v1alpha1.Gadget{}:  {Namespaces: map[string]cache.Config{e.namespace: {}}},
						&corev1.ConfigMap{}: mine,
						&corev1.Service{}:   mine,
					}
				}
				o.NewClient = intercepted(interceptor.Funcs{List: countLabelLists})
			}))

			e.gadget("g", v1alpha1.GadgetSpec{Mode: "expose"})
			e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
			e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "" })
			e.fe.Await("the gadget's Service to be pruned", func() bool { return !e.exists(&corev1.Service{}, "g") })
			if !e.exists(&corev1.ConfigMap{}, "g-config") {
				t.Error("the ConfigMap, still desired, was deleted")
			}
			if n := byLabel.Load(); n != 0 {
				t.Errorf("the reconciles listed children by label %d times, not through the index", n)
			}
		})
	}
}

// A child that kfsm applied is in the index although its event, an echo
// of kfsm's own write, drives no reconcile: when the status write that
// should have recorded it is lost and the spec stops asking for it, the
// next pass finds it by the index alone, and prunes it.
func TestUnderManagerAChildWhoseRecordWasLostIsPruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var lost atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	loseFirstStatusWrite := func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		if obj.GetName() == "g" && lost.CompareAndSwap(false, true) {
			close(held)
			<-release
			return apierrors.NewServiceUnavailable("the status write was lost")
		}
		return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
	}
	fsmtest.Run(e.fe, webMachine("web-lost-record"), fsmtest.WithManagerOptions(func(o *ctrl.Options) {
		o.NewClient = intercepted(interceptor.Funcs{SubResourcePatch: loseFirstStatusWrite})
	}))

	e.gadget("g", v1alpha1.GadgetSpec{Mode: "expose"})
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("no status write within a minute")
	}
	if !e.exists(&corev1.Service{}, "g") {
		t.Fatal("the first pass wrote its status before it applied the Service")
	}
	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "" })
	close(release)
	e.fe.Await("the Service, applied but never recorded, to be pruned", func() bool { return !e.exists(&corev1.Service{}, "g") })
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	if !e.exists(&corev1.ConfigMap{}, "g-config") {
		t.Error("the ConfigMap, still desired, was deleted")
	}
}

// intercepted makes the manager's client with funcs in front of it.
func intercepted(funcs interceptor.Funcs) func(*rest.Config, client.Options) (client.Client, error) {
	return func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, opts)
		if err != nil {
			return nil, err
		}
		return interceptor.NewClient(c, funcs), nil
	}
}

// Two machines of one manager that own the same child type each index it
// in the cache, and each prunes only its own children.
func TestTwoMachinesOwningOneTypeEachPruneOnlyTheirOwn(t *testing.T) {
	e := newEnv(t)
	doors := fsm.New[*v1alpha1.Door]("door-config", fsm.Pipeline).
		Initial("Config").
		State("Config", func(ctx context.Context, r *fsm.Request[*v1alpha1.Door]) fsm.Result {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name + "-door"}}
			return failOr(r.Apply(ctx, cm), fsm.Next("Serving"))
		}, fsm.To("Serving")).
		State("Serving", nil, fsm.Final()).
		Owns(&corev1.ConfigMap{})
	fsmtest.Run(e.fe, webMachine("web-shared"), fsmtest.WithMachine(doors))

	d := &v1alpha1.Door{ObjectMeta: metav1.ObjectMeta{Name: "d"}}
	e.fe.Create(d)
	e.gadget("g", v1alpha1.GadgetSpec{Mode: "expose"})
	e.fe.AwaitReady(d)
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })

	e.update(func(s *v1alpha1.GadgetSpec) { s.Mode = "" })
	e.fe.Await("the gadget's Service to be pruned", func() bool { return !e.exists(&corev1.Service{}, "g") })
	for _, name := range []string{"g-config", "d-door"} {
		if !e.exists(&corev1.ConfigMap{}, name) {
			t.Errorf("ConfigMap %s, still desired, was deleted", name)
		}
	}
}
