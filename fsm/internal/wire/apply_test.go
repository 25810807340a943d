package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// trimmed is what Trim must produce, the slow way: decoded into
// maps, without the status and the nulls.
func trimmed(t testing.TB, src []byte) any {
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
	got, err := Trim(src)
	if err != nil {
		t.Fatalf("Trim(%s): %v", src, err)
	}
	var gotv any
	if err := json.Unmarshal(got, &gotv); err != nil {
		t.Fatalf("Trim(%s) = %s, not JSON: %v", src, got, err)
	}
	if diff := cmp.Diff(trimmed(t, src), gotv); diff != "" {
		t.Errorf("Trim(%s) = %s (-want +got):\n%s", src, got, diff)
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
	got, err := Trim([]byte(`{"metadata":{"creationTimestamp":null,"name":"x"},"spec":{"template":{"metadata":{"creationTimestamp":null}},"list":[null,{"a":null,"b":[1,{"c":null}]}]},"status":{"x":1}}`))
	if want := `{"metadata":{"name":"x"},"spec":{"template":{"metadata":{}},"list":[null,{"b":[1,{}]}]}}`; err != nil || string(got) != want {
		t.Errorf("Trim = %s, %v; want %s", got, err, want)
	}
	for _, bad := range []string{``, `[]`, `{"a":`, `{"a":1`, `{"a" 1}`, `{"a":"x}`, `{"a":[1,2}`, `{} x`, `{"a":}`} {
		if got, err := Trim([]byte(bad)); err == nil {
			t.Errorf("Trim(%q) = %s, want an error", bad, got)
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
			return // Trim's input is an object that encoding/json wrote
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
