package fsm_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// collectionRequests counts the list and watch requests of each resource
// of one API group, as the caches of a manager make them.
type collectionRequests struct {
	prefix string // "/apis/<group>/<version>/"
	mu     sync.Mutex
	counts map[string]int // by resource
}

func (c *collectionRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if rest, ok := strings.CutPrefix(req.URL.Path, c.prefix); ok && req.Method == http.MethodGet {
			parts := strings.Split(rest, "/")
			if len(parts) == 1 || len(parts) == 3 && parts[0] == "namespaces" {
				c.mu.Lock()
				c.counts[parts[len(parts)-1]]++
				c.mu.Unlock()
			}
		}
		return rt.RoundTrip(req)
	})
}

func (c *collectionRequests) of(resource string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[resource]
}

// copyCRD reads one of the test API's CRDs and moves it to group.
func copyCRD(t *testing.T, file, group string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "internal", "testapi", "crd", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	crd.Spec.Group = group
	crd.Name = crd.Spec.Names.Plural + "." + group
	crd.Annotations = nil
	return &crd
}

// crds installs and removes CRDs for one test, through c.
type crds struct {
	t *testing.T
	c client.Client
}

// install creates crd and waits until the API server serves it.
func (k crds) install(crd *apiextensionsv1.CustomResourceDefinition) {
	k.t.Helper()
	crd = crd.DeepCopy()
	if err := k.c.Create(k.t.Context(), crd); err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { _ = k.c.Delete(context.Background(), crd) })
	await(k.t, crd.Name+" established", func() bool {
		var got apiextensionsv1.CustomResourceDefinition
		if err := k.c.Get(k.t.Context(), client.ObjectKeyFromObject(crd), &got); err != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	})
}

// remove deletes crd and waits until it is gone, its objects with it.
func (k crds) remove(crd *apiextensionsv1.CustomResourceDefinition) {
	k.t.Helper()
	if err := k.c.Delete(k.t.Context(), crd.DeepCopy()); err != nil {
		k.t.Fatal(err)
	}
	await(k.t, crd.Name+" gone", func() bool {
		err := k.c.Get(k.t.Context(), client.ObjectKeyFromObject(crd), &apiextensionsv1.CustomResourceDefinition{})
		return apierrors.IsNotFound(err)
	})
}

// unservedLines are the lines that say that resource is no longer served,
// and those that say it is again.
func unservedLines(logs *logLines, resource string) (gone, back int) {
	for _, line := range logs.all() {
		if line.value("resource") != resource {
			continue
		}
		switch {
		case strings.Contains(line.msg, "no longer serves"):
			gone++
		case strings.Contains(line.msg, "serves the resource again"):
			back++
		}
	}
	return gone, back
}

// Deleting the CRD of a machine's kind, or of a kind it owns, while the
// operator runs: kfsm says so in one line and the kind's informer stops
// listing and watching it, instead of retrying every few seconds with an
// error each time; the machine goes on with its other kinds, and when the
// CRD is back, the informer lists it again and the machine reconciles its
// objects as before, in the same process.
func TestUnderManagerADeletedCRDStopsItsInformerUntilItIsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	group := e.namespace + ".kfsm.dev"
	gv := schema.GroupVersion{Group: group, Version: "v1alpha1"}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	scheme.AddKnownTypes(gv, &v1alpha1.Gadget{}, &v1alpha1.GadgetList{}, &v1alpha1.Widget{}, &v1alpha1.WidgetList{})
	metav1.AddToGroupVersion(scheme, gv)
	direct, err := client.New(e.fe.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	k := crds{t: t, c: direct}
	gadgets, widgets := copyCRD(t, "testing.kfsm.dev_gadgets.yaml", group), copyCRD(t, "testing.kfsm.dev_widgets.yaml", group)
	k.install(gadgets)
	k.install(widgets)

	var released runs
	m := fsm.New[*gadget]("crd-gone", fsm.Lifecycle).
		Initial("Built").
		State("Built", func(ctx context.Context, r *request) fsm.Result {
			w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Name: r.Object.Name, Namespace: r.Object.Namespace}, Spec: v1alpha1.WidgetSpec{Size: 1}}
			if err := r.Apply(ctx, w); err != nil {
				return fsm.Fail(err)
			}
			return fsm.Done()
		}, fsm.Final()).
		OnDelete("Released").
		State("Released", counted(&released, done), fsm.Final()).
		Owns(&v1alpha1.Widget{})
	requests := &collectionRequests{prefix: "/apis/" + gv.String() + "/", counts: map[string]int{}}
	cfg := e.fe.Config()
	cfg.Wrap(requests.wrap)
	logs := &logLines{}
	// A cache of the whole cluster, the default, whose informers take a
	// watch error handler; the test's kinds are its own.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Logger:     logr.New(logs.sink()),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("the manager stopped with %v, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the manager did not stop within 30 s")
		}
	})

	create := func(name string) {
		t.Helper()
		g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.namespace}}
		if err := direct.Create(t.Context(), g); err != nil {
			t.Fatal(err)
		}
		// Before the manager stops, so that its finalizer goes.
		t.Cleanup(func() {
			_ = direct.Delete(context.Background(), g)
			await(t, name+" deleted", func() bool {
				return apierrors.IsNotFound(direct.Get(context.Background(), client.ObjectKeyFromObject(g), g))
			})
		})
		await(t, name+" ready with its widget", func() bool {
			var w v1alpha1.Widget
			return direct.Get(t.Context(), client.ObjectKeyFromObject(g), g) == nil &&
				meta.IsStatusConditionTrue(g.Status.Conditions, fsm.ConditionReady) &&
				direct.Get(t.Context(), client.ObjectKeyFromObject(g), &w) == nil
		})
	}
	create("g")

	// quiet removes crd and reports how many lists and watches of its
	// resource the manager makes after the first seconds.
	quiet := func(crd *apiextensionsv1.CustomResourceDefinition, resource string) {
		t.Helper()
		before, errs := requests.of(crd.Spec.Names.Plural), len(logs.errors())
		k.remove(crd)
		time.Sleep(3 * time.Second)
		settled := requests.of(crd.Spec.Names.Plural)
		time.Sleep(7 * time.Second)
		after := requests.of(crd.Spec.Names.Plural)
		lines, _ := unservedLines(logs, resource)
		t.Logf("%s: %d lists and watches in the 3 s after the CRD went, %d in the 7 s after those; %d lines say so, and %d error lines were logged",
			resource, settled-before, after-settled, lines, len(logs.errors())-errs)
		if lines != 1 {
			t.Errorf("%d lines say that %s is no longer served, want 1", lines, resource)
		}
		if after != settled {
			t.Errorf("%d lists and watches of %s from 3 s to 10 s after its CRD went, want none", after-settled, resource)
		}
	}
	wantWidgets := "widgets.v1alpha1." + group
	wantGadgets := "gadgets.v1alpha1." + group

	// A kind it owns first: the machine goes on, its gadgets fail to
	// apply their widget, each on its own backoff.
	quiet(widgets, wantWidgets)
	// Then its own kind: the API server deletes the gadgets first, and
	// the machine runs their deletion path meanwhile.
	quiet(gadgets, wantGadgets)
	if n := released.count(); n != 1 {
		t.Errorf("the deletion path ran %d times before the CRD went, want 1", n)
	}

	k.install(gadgets)
	k.install(widgets)
	for _, r := range []string{wantGadgets, wantWidgets} {
		await(t, r+" served again", func() bool { _, back := unservedLines(logs, r); return back == 1 })
	}
	create("g2")
	for _, r := range []string{wantGadgets, wantWidgets} {
		if gone, back := unservedLines(logs, r); gone != 1 || back != 1 {
			t.Errorf("%s: %d lines say it is no longer served and %d that it is again, want 1 and 1", r, gone, back)
		}
	}
}
