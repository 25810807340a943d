package fsm_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

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
		// A new child is created, with a request that fails if an object
		// of the name exists: its fields are kfsm's update until its first
		// apply (TestUnderManagerANewChildCostsOneRequest).
		if !managedBy(child, "kfsm-web", metav1.ManagedFieldsOperationUpdate) {
			t.Errorf("%s was not created by kfsm-web: %v", child.GetName(), child.GetManagedFields())
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

// A 409 on a child's delete keeps the child and its record: no Pruned
// event until it is really gone, and a deletion path does not end.
func TestUnderManagerAConflictOnAChildDeleteKeepsTheChild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	isRole := func(o client.Object) bool { _, ok := o.(*rbacv1.ClusterRole); return ok }
	m := fsm.New[*gadget]("delete-conflict", fsm.Lifecycle).
		Initial("Start").
		State("Start", func(ctx context.Context, r *request) fsm.Result {
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Namespace + "-reader"}}
			return failOr(r.Apply(ctx, role), fsm.Done())
		}, fsm.Final()).
		OnDelete("Cleanup").
		State("Cleanup", done, fsm.Final()).
		Owns(&rbacv1.ClusterRole{})
	l := run(e, m)
	e.gadget("g", v1alpha1.GadgetSpec{})
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	role := client.ObjectKey{Name: e.namespace + "-reader"}
	// The conflict lasts until the checks below are done: a retry that
	// succeeded in between would leave nothing to check.
	conflict := &fault{op: "delete", match: isRole, times: math.MaxInt, err: apierrors.NewConflict(schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, role.Name, errors.New("injected"))}
	l.inject(conflict)
	if err := e.direct.Delete(t.Context(), e.get("g")); err != nil {
		t.Fatal(err)
	}
	e.fe.Await("the failed delete", func() bool { return occurrences(e.apiEvents(), fsm.ReasonHandlerFailed) > 0 })
	if err := e.direct.Get(t.Context(), role, &rbacv1.ClusterRole{}); err != nil {
		t.Fatalf("after the conflict, the child is %v", err)
	}
	if g := e.get("g"); len(g.Status.Outputs) != 1 || len(g.Finalizers) != 1 {
		t.Errorf("after the conflict: outputs %v, finalizers %v; want the child and the finalizer kept", g.Status.Outputs, g.Finalizers)
	}
	if n := occurrences(e.apiEvents(), fsm.ReasonPruned); n != 0 {
		t.Errorf("%d Pruned events for a child that was not deleted", n)
	}
	l.lift(conflict)
	e.fe.Await("the gadget to be gone", func() bool {
		return apierrors.IsNotFound(e.direct.Get(t.Context(), e.key("g"), &gadget{}))
	})
	if err := e.direct.Get(t.Context(), role, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the deletion path, the cluster-scoped child is %v", err)
	}
}

// A child that carries its parent's UID but is missing from the status,
// as one applied just before a crash is, is found through the cache,
// whether it was there when the manager started or came later, and pruned
// once the parent's pass no longer applies it. An object that carries
// another parent's UID stays.
func TestUnderManagerAChildMissingFromTheStatusIsPruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.gadget("g", v1alpha1.GadgetSpec{})
	unrecorded := func(name string, uid types.UID) {
		t.Helper()
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.namespace, Labels: map[string]string{
				fsm.LabelManagedBy: "kfsm", fsm.LabelMachine: "web-unrecorded", fsm.LabelOwnerUID: string(uid),
			}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if uid == g.UID {
			svc.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Gadget",
				Name: g.Name, UID: g.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
		}
		if err := e.direct.Create(t.Context(), svc); err != nil {
			t.Fatal(err)
		}
	}
	unrecorded("before-start", g.UID)
	unrecorded("another-parents", "0b5b0e0e-1111-2222-3333-444455556666")
	run(e, webMachine("web-unrecorded"))
	e.fe.Await("the gadget to be Ready", func() bool { return e.ready("g") })
	e.fe.Await("the child there at start to be pruned", func() bool { return !e.exists(&corev1.Service{}, "before-start") })

	// Each child's event reconciles the parent, which must find that
	// child then: nothing reconciles the converged parent after it. A
	// burst, so that a lag between the cache and its index would show.
	const later = 20
	for i := range later {
		unrecorded(fmt.Sprintf("while-running-%d", i), g.UID)
	}
	e.fe.Await("the children that came later to be pruned", func() bool {
		var services corev1.ServiceList
		if err := e.direct.List(t.Context(), &services, client.InNamespace(e.namespace)); err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(services.Items, func(s corev1.Service) bool { return strings.HasPrefix(s.Name, "while-running-") })
	})
	if !e.exists(&corev1.Service{}, "another-parents") {
		t.Error("the Service of another parent was deleted")
	}
	if got := e.get("g").Status.Outputs; len(got) != 1 || got[0].Kind != "ConfigMap" {
		t.Errorf("g records %v, want only its ConfigMap", got)
	}
}
