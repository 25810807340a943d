package storage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/storage"
)

// env is an API server, a client of it, the moose example's CRD as
// released, at v1alpha1 alone, and the conversion webhook of a v1beta1
// that names spec.weight spec.mass.
type env struct {
	t   *testing.T
	c   client.Client
	crd *apiextensionsv1.CustomResourceDefinition
	// conversion is how the API server reaches the webhook; stop closes
	// the webhook's server.
	conversion *apiextensionsv1.WebhookClientConfig
	stop       func()
}

func newEnv(t *testing.T) *env {
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	logf.SetLogger(logr.Discard())
	cl, err := cluster.Start(t.Context(), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(); err != nil {
			t.Error(err)
		}
	})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(cl.Config)
	cfg.QPS = -1 // unthrottled, as a migration of many objects should be
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("..", "examples", "moose", "crd", "examples.kfsm.dev_moose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1alpha1" {
		t.Fatalf("the moose CRD has versions %v, not v1alpha1 alone; the test needs a new start", crd.Spec.Versions)
	}
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "herd"}}); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, c: c, crd: crd}
	e.serveConversion()
	return e
}

// serveConversion starts the conversion webhook's server, over TLS with
// a certificate that the API server trusts.
func (e *env) serveConversion() {
	serving, err := cluster.NewWebhookServing()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = serving.Close() })
	opts := serving.ServerOptions()
	l, err := net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
	if err != nil {
		e.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(convert), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		_ = srv.ServeTLS(l, filepath.Join(opts.CertDir, "tls.crt"), filepath.Join(opts.CertDir, "tls.key"))
	}()
	e.stop = func() { _ = srv.Close() }
	e.t.Cleanup(e.stop)
	cc := serving.ClientConfig()
	url := *cc.URL + "/convert"
	e.conversion = &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: cc.CABundle}
}

// convert is the conversion webhook: v1alpha1's spec.weight is v1beta1's
// spec.mass.
func convert(w http.ResponseWriter, r *http.Request) {
	var review apiextensionsv1.ConversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not a ConversionReview: %v", err), http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	from, to := "weight", "mass"
	if req.DesiredAPIVersion == "examples.kfsm.dev/v1alpha1" {
		from, to = to, from
	}
	for _, raw := range req.Objects {
		var obj map[string]any
		if err := json.Unmarshal(raw.Raw, &obj); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if spec, ok := obj["spec"].(map[string]any); ok && obj["apiVersion"] != req.DesiredAPIVersion {
			if v, ok := spec[from]; ok {
				spec[to] = v
				delete(spec, from)
			}
		}
		obj["apiVersion"] = req.DesiredAPIVersion
		out, err := json.Marshal(obj)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	review.Request, review.Response = nil, resp
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// install creates the CRD, and waits until it serves its versions.
func (e *env) install() {
	e.t.Helper()
	if err := e.c.Create(e.t.Context(), e.crd); err != nil {
		e.t.Fatal(err)
	}
	e.served()
}

// toBeta makes v1beta1 the storage version, v1alpha1 still served and
// converted by the webhook, as a release that moves the type to v1beta1
// does: v1beta1 has v1alpha1's schema, with spec.weight named spec.mass.
func (e *env) toBeta() {
	e.t.Helper()
	e.update(func(crd *apiextensionsv1.CustomResourceDefinition) {
		beta := *crd.Spec.Versions[0].DeepCopy()
		beta.Name = "v1beta1"
		spec := beta.Schema.OpenAPIV3Schema.Properties["spec"]
		spec.Properties["mass"] = spec.Properties["weight"]
		delete(spec.Properties, "weight")
		spec.Required = []string{"mass"}
		beta.Schema.OpenAPIV3Schema.Properties["spec"] = spec
		crd.Spec.Versions[0].Storage = false
		crd.Spec.Versions = append(crd.Spec.Versions, beta)
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook:  &apiextensionsv1.WebhookConversion{ClientConfig: e.conversion, ConversionReviewVersions: []string{"v1"}},
		}
	})
	e.served()
}

// dropAlpha removes v1alpha1 from the CRD, and with it the conversion,
// which one version needs no more.
func (e *env) dropAlpha() error {
	e.t.Helper()
	return e.tryUpdate(func(crd *apiextensionsv1.CustomResourceDefinition) {
		crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1alpha1" })
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	})
}

func (e *env) update(change func(*apiextensionsv1.CustomResourceDefinition)) {
	e.t.Helper()
	if err := e.tryUpdate(change); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) tryUpdate(change func(*apiextensionsv1.CustomResourceDefinition)) error {
	if err := e.c.Get(e.t.Context(), client.ObjectKeyFromObject(e.crd), e.crd); err != nil {
		return err
	}
	change(e.crd)
	return e.c.Update(e.t.Context(), e.crd)
}

// served waits until every version of the CRD answers a list.
func (e *env) served() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, v := range e.crd.Spec.Versions {
		for {
			if _, err := e.list(v.Name); err == nil {
				break
			} else if time.Now().After(deadline) {
				e.t.Fatalf("%s not served: %v", v.Name, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (e *env) storedVersions() []string {
	e.t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := e.c.Get(e.t.Context(), client.ObjectKeyFromObject(e.crd), crd); err != nil {
		e.t.Fatal(err)
	}
	return crd.Status.StoredVersions
}

// moose creates a moose at version, with a weight (v1beta1's mass) and
// a state.
func (e *env) moose(version, name string, weight int64) {
	e.t.Helper()
	field := map[string]string{"v1alpha1": "weight", "v1beta1": "mass"}[version]
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "examples.kfsm.dev/" + version, "kind": "Moose",
		"metadata": map[string]any{"namespace": "herd", "name": name},
		"spec":     map[string]any{field: weight},
	}}
	ctx := e.t.Context()
	if err := e.c.Create(ctx, m); err != nil {
		e.t.Fatal(err)
	}
	if err := unstructured.SetNestedField(m.Object, "Roaming", "status", "state"); err != nil {
		e.t.Fatal(err)
	}
	if err := e.c.Status().Update(ctx, m); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) list(version string) ([]unstructured.Unstructured, error) {
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion("examples.kfsm.dev/" + version)
	l.SetKind("MooseList")
	err := e.c.List(context.WithoutCancel(e.t.Context()), l, client.InNamespace("herd"))
	return l.Items, err
}

// The moose type moves from v1alpha1 to v1beta1, which names spec.weight
// spec.mass, with a conversion webhook, and objects stored in both:
// Migrate writes back the ones stored in v1alpha1 and no other, which the
// API server converts and stores in v1beta1, and trims storedVersions.
// Then v1alpha1 can be removed, and with the webhook gone, every moose
// reads as it did through it. Run again, Migrate reads nothing.
func TestMigrateMovesEveryObjectToTheStorageVersion(t *testing.T) {
	e := newEnv(t)
	e.install()
	const old, fresh = 60, 15
	for i := range old {
		e.moose("v1alpha1", fmt.Sprintf("m-%03d", i), int64(100+i))
	}
	e.toBeta()
	for i := range fresh {
		e.moose("v1beta1", fmt.Sprintf("m-new-%03d", i), int64(500+i))
	}
	if got, want := e.storedVersions(), []string{"v1alpha1", "v1beta1"}; !slices.Equal(got, want) {
		t.Fatalf("storedVersions = %v before the migration, want %v", got, want)
	}
	before, err := e.list("v1beta1")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range before {
		if mass, ok, _ := unstructured.NestedInt64(m.Object, "spec", "mass"); !ok || mass < 100 {
			t.Fatalf("moose %s reads at v1beta1 with spec %v: the conversion webhook did not convert it", m.GetName(), m.Object["spec"])
		}
	}

	if _, err := storage.Migrate(t.Context(), e.c, "nothing.examples.kfsm.dev"); err == nil || !strings.Contains(err.Error(), "nothing.examples.kfsm.dev") {
		t.Errorf("Migrate of a CRD that is not there = %v, want an error that names it", err)
	}
	res, err := storage.Migrate(t.Context(), e.c, e.crd.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := storage.Result{StorageVersion: "v1beta1", Objects: old + fresh, Rewritten: old, StoredVersions: []string{"v1alpha1", "v1beta1"}}
	if res.StorageVersion != want.StorageVersion || res.Objects != want.Objects || res.Rewritten != want.Rewritten || !slices.Equal(res.StoredVersions, want.StoredVersions) {
		t.Errorf("Migrate = %+v, want %+v", res, want)
	}
	if got := e.storedVersions(); !slices.Equal(got, []string{"v1beta1"}) {
		t.Errorf("storedVersions = %v after the migration, want [v1beta1]", got)
	}

	if err := e.dropAlpha(); err != nil {
		t.Fatalf("removing v1alpha1 after the migration: %v", err)
	}
	e.stop() // no conversion is left to make
	// The API server's storage of the kind starts anew with the CRD's
	// change, and refuses lists until it has.
	var after []unstructured.Unstructured
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if after, err = e.list("v1beta1"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("reading the moose with v1alpha1 removed: %v", err)
		}
	}
	if len(after) != len(before) {
		t.Fatalf("%d moose read after the migration, %d before", len(after), len(before))
	}
	for i := range before {
		b, a := before[i], after[i]
		for _, field := range [][]string{{"spec"}, {"status"}} {
			bv, _, _ := unstructured.NestedMap(b.Object, field...)
			av, _, _ := unstructured.NestedMap(a.Object, field...)
			if fmt.Sprint(bv) != fmt.Sprint(av) {
				t.Errorf("moose %s's %s was %v before the migration, is %v after", b.GetName(), field[0], bv, av)
			}
		}
	}

	again, err := storage.Migrate(t.Context(), e.c, e.crd.Name)
	if err != nil || again.Objects != 0 || again.Rewritten != 0 {
		t.Errorf("Migrate again = %+v, %v; want nothing read", again, err)
	}
}

// What the migration prevents: with storedVersions trimmed and v1alpha1
// removed, and no migration, the moose stored in v1alpha1 cannot be read.
func TestWithoutTheMigrationObjectsOfARemovedVersionAreLost(t *testing.T) {
	e := newEnv(t)
	e.install()
	e.moose("v1alpha1", "m-000", 100)
	e.toBeta()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(e.crd), crd); err != nil {
		t.Fatal(err)
	}
	before := crd.DeepCopy()
	crd.Status.StoredVersions = []string{"v1beta1"}
	if err := e.c.Status().Patch(t.Context(), crd, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if err := e.dropAlpha(); err != nil {
		t.Fatal(err)
	}
	// Not a refusal of a storage that starts anew: the one that says why.
	// (A list waits some seconds for the storage before it fails.)
	const why = "request to convert CR from an invalid group/version: examples.kfsm.dev/v1alpha1"
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := e.list("v1beta1"); err != nil && strings.Contains(err.Error(), why) {
			return
		}
	}
	t.Fatalf("no list failed with %q: the migration's test proves nothing", why)
}
