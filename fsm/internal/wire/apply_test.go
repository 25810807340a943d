package wire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// wantBody is what Body must produce, the slow way: decoded into
// maps, without the status and the nulls.
func wantBody(t testing.TB, src []byte) any {
	var m map[string]any
	if err := json.Unmarshal(src, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "status")
	var drop func(v any) any
	drop = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if x == nil {
					delete(v, k)
					continue
				}
				v[k] = drop(x)
			}
		case []any:
			for i, x := range v {
				v[i] = drop(x)
			}
		}
		return v
	}
	return drop(m)
}

func checkTrim(t testing.TB, src []byte) {
	got, err := Body(json.RawMessage(src))
	if err != nil {
		t.Fatalf("Body(%s): %v", src, err)
	}
	var gotv any
	if err := json.Unmarshal(got, &gotv); err != nil {
		t.Fatalf("Body(%s) = %s, not JSON: %v", src, got, err)
	}
	if diff := cmp.Diff(wantBody(t, src), gotv); diff != "" {
		t.Errorf("Body(%s) = %s (-want +got):\n%s", src, got, diff)
	}
}

func TestTrimApplyDropsStatusAndNulls(t *testing.T) {
	replicas := int32(2)
	deployment := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"a": `quote " and \ backslash`}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}},
		},
		Status: appsv1.DeploymentStatus{ReadyReplicas: 1},
	}
	service := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: "None", Ports: []corev1.ServicePort{{Port: 80}}}}
	for _, obj := range []any{deployment, service, &corev1.ConfigMap{Data: map[string]string{"k": "null"}}} {
		src, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		checkTrim(t, src)
	}
	got, err := Body(json.RawMessage(`{"metadata":{"creationTimestamp":null,"name":"x"},"spec":{"template":{"metadata":{"creationTimestamp":null}},"list":[null,{"a":null,"b":[1,{"c":null}]}]},"status":{"x":1}}`))
	if want := `{"metadata":{"name":"x"},"spec":{"template":{"metadata":{}},"list":[null,{"b":[1,{}]}]}}`; err != nil || string(got) != want {
		t.Errorf("Body = %s, %v; want %s", got, err, want)
	}
	for _, bad := range []string{``, `[]`, `{"a":`, `{"a":1`, `{"a" 1}`, `{"a":"x}`, `{"a":[1,2}`, `{} x`, `{"a":}`} {
		if got, err := Body(json.RawMessage(bad)); err == nil {
			t.Errorf("Body(%q) = %s, want an error", bad, got)
		}
	}
}

func FuzzTrimApply(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"status":null}`, `{"a":null,"b":{"c":null,"d":[null,{"e":null}]},"status":{"f":1}}`,
		`{"s":"with \"quotes\" and null, {braces}","n":-1.5e3,"t":true}`, ` { "a" : [ 1 , null ] } `,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		var m map[string]any
		if json.Unmarshal(src, &m) != nil || m == nil {
			return // Body trims an object that encoding/json wrote
		}
		checkTrim(t, src)
	})
}

// What an apply's answer may differ in from the copy read before it,
// and still be a version that the apply made.
func TestOthersWroteTellsTheApplysChangesFromOthers(t *testing.T) {
	body := []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","labels":{"app":"web"}},` +
		`"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"web","image":"web:2"}]}}}}`)
	before := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", ResourceVersion: "10", Generation: 1, Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(2)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "web", Image: "web:1", ImagePullPolicy: corev1.PullIfNotPresent}},
			}},
		},
	}
	cases := map[string]struct {
		change func(*appsv1.Deployment)
		want   bool
	}{
		"the apply's own change, and what the server set with it": {func(d *appsv1.Deployment) {
			d.ResourceVersion, d.Generation = "11", 2
			d.Spec.Template.Spec.Containers[0].Image = "web:2"
			d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kfsm"}}
		}, false},
		"a status written by the controller": {func(d *appsv1.Deployment) {
			d.ResourceVersion = "11"
			d.Status.AvailableReplicas = 2
		}, true},
		"an annotation the apply does not set": {func(d *appsv1.Deployment) {
			d.ResourceVersion = "11"
			d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "2"}
		}, true},
		"a spec field the apply does not set": {func(d *appsv1.Deployment) {
			d.ResourceVersion = "11"
			d.Spec.Paused = true
		}, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			after := before.DeepCopy()
			c.change(after)
			if got := OthersWrote(before, after, body); got != c.want {
				t.Errorf("OthersWrote = %v, want %v", got, c.want)
			}
		})
	}
}

// A digest is what status.outputs records of an apply: 32 hexadecimal
// digits, the same for the same body, another for another.
func TestDigestIsTheSameForTheSameBody(t *testing.T) {
	a, b := DigestOf([]byte(`{"data":{"k":"v"}}`)), DigestOf([]byte(`{"data":{"k":"w"}}`))
	if a != DigestOf([]byte(`{"data":{"k":"v"}}`)) || a == b {
		t.Errorf("digests %s and %s of the same and of another body", a, b)
	}
	if s := a.String(); len(s) != 32 || strings.Trim(s, "0123456789abcdef") != "" {
		t.Errorf("digest %q is not 32 hexadecimal digits", s)
	}
}

// Typed content of a built-in kind is digested by its protobuf encoding:
// the same content gives the same digest however its maps were filled,
// other content or another version another; content without that
// encoding is digested by its apply body.
func TestDigestOfContentIsTheSameForTheSameContent(t *testing.T) {
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	configMap := func(keys ...string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: map[string]string{}}, Data: map[string]string{}}
		for _, k := range keys {
			cm.Data[k], cm.Labels[k] = "v-"+k, k
		}
		return cm
	}
	digest := func(obj *corev1.ConfigMap, gvk schema.GroupVersionKind) Digest {
		t.Helper()
		d, body, err := DigestOfContent(obj, gvk)
		if err != nil || body != nil {
			t.Fatalf("DigestOfContent = %s, %q, %v; want a digest of the protobuf encoding", d, body, err)
		}
		return d
	}
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	want := digest(configMap(keys...), gvk)
	reversed := slices.Clone(keys)
	slices.Reverse(reversed)
	for range 20 { // Go fills and walks a map in an order of its own each time
		if got := digest(configMap(reversed...), gvk); got != want {
			t.Fatalf("digest %s of the same content filled the other way, want %s", got, want)
		}
	}
	changed := configMap(keys...)
	changed.Data["a"] = "w"
	v2 := gvk
	v2.Version = "v2"
	for name, d := range map[string]Digest{"another value": digest(changed, gvk), "another version": digest(configMap(keys...), v2)} {
		if d == want {
			t.Errorf("%s: the same digest %s", name, d)
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"a": "v"}, "status": map[string]any{"b": "w"}}}
	if d, body, err := DigestOfContent(u, gvk); err != nil || string(body) != `{"data":{"a":"v"}}` || d != DigestOf(body) {
		t.Errorf("DigestOfContent of unstructured content = %s, %q, %v; want the digest of its apply body", d, body, err)
	}
}

// benchService is a child as a handler applies it, with the labels and
// the owner reference that kfsm adds.
func benchService() *corev1.Service {
	uid := "0f6c3f7e-1234-4567-89ab-cdef01234567"
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "g-123", Namespace: "bench",
			Labels:          map[string]string{"app.kubernetes.io/managed-by": "kfsm", "kfsm.dev/machine": "gadget", "kfsm.dev/owner-uid": uid},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "testing.kfsm.dev/v1alpha1", Kind: "Gadget", Name: "g-123", UID: types.UID(uid)}}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "g-123"}, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

// BenchmarkDigestOfContent is the digest of a typed child, which every
// reconcile that applies it makes; BenchmarkDigestOfApplyBody is the
// digest of the same child's apply body, as kfsm made it for every child
// before, and still does for unstructured ones.
func BenchmarkDigestOfContent(b *testing.B) {
	svc, gvk := benchService(), corev1.SchemeGroupVersion.WithKind("Service")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DigestOfContent(svc, gvk); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDigestOfApplyBody(b *testing.B) {
	svc := benchService()
	b.ReportAllocs()
	for b.Loop() {
		body, err := Body(svc)
		if err != nil {
			b.Fatal(err)
		}
		DigestOf(body)
	}
}

// OthersWrote reads the two objects and changes neither: the answer's
// resourceVersion is what the status records, and the copy read before
// may be the cache's own.
func TestOthersWroteLeavesBothObjectsAsTheyWere(t *testing.T) {
	object := func(rv string, data string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "resourceVersion": rv, "generation": int64(1), "managedFields": []any{map[string]any{"manager": "kfsm"}}},
			"data":     map[string]any{"a": data},
		}}
	}
	before, after := object("1", "v"), object("2", "w")
	wantBefore, wantAfter := before.DeepCopy(), after.DeepCopy()
	OthersWrote(before, after, []byte(`{"data":{"a":"w"}}`))
	if diff := cmp.Diff(wantBefore.Object, before.Object); diff != "" {
		t.Errorf("OthersWrote changed the object read before (-was +is):\n%s", diff)
	}
	if diff := cmp.Diff(wantAfter.Object, after.Object); diff != "" {
		t.Errorf("OthersWrote changed the apply's answer (-was +is):\n%s", diff)
	}
}
