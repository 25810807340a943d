package argocd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/kfsm/kfsm/integrations/argocd"
)

// The README's ConfigMap installs health.lua as it is, for every kind of
// the examples.
func TestReadmeConfigMapIsCurrent(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```yaml\n")
	if !ok {
		t.Fatal("README.md has no yaml block")
	}
	block, _, _ = strings.Cut(block, "```")
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(block), &cm); err != nil {
		t.Fatalf("the README's ConfigMap: %v", err)
	}

	crds, err := filepath.Glob(filepath.Join("..", "..", "examples", "*", "crd", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs of the examples found (%v)", err)
	}
	want := map[string]string{}
	for _, path := range crds {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want["resource.customizations.health."+crd.Spec.Group+"_"+crd.Spec.Names.Kind] = argocd.HealthLua
	}
	if diff := cmp.Diff(want, cm.Data); diff != "" {
		t.Errorf("the README's argocd-cm data (-want +got):\n%s", diff)
	}
	if cm.Name != "argocd-cm" || cm.Namespace != "argocd" {
		t.Errorf("the README's ConfigMap is %s/%s, want argocd/argocd-cm", cm.Namespace, cm.Name)
	}
}
