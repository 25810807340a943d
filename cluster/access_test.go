package cluster_test

import (
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
)

func TestServiceAccountHasItsRoleAndNothingMore(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	c, err := cluster.Start(t.Context(), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	role := fstest.MapFS{"rbac/role.yaml": {Data: []byte(`---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
`)}}
	cfg, err := c.ServiceAccount(t.Context(), "ops", "reader", role)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.List(t.Context(), &corev1.ConfigMapList{}, client.InNamespace("default")); err != nil {
		t.Errorf("listing ConfigMaps, which the role grants: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}
	err = sa.Create(t.Context(), cm)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), cluster.ServiceAccountUser("ops", "reader")) {
		t.Errorf("creating a ConfigMap, which the role does not grant: got %v, want forbidden for the ServiceAccount", err)
	}
	if err := sa.List(t.Context(), &corev1.SecretList{}, client.InNamespace("default")); !apierrors.IsForbidden(err) {
		t.Errorf("listing Secrets, which the role does not grant: got %v, want forbidden", err)
	}

	// A second ServiceAccount may share the role; a file without one is an error.
	if _, err := c.ServiceAccount(t.Context(), "ops", "other", role); err != nil {
		t.Errorf("a second ServiceAccount with the same role: %v", err)
	}
	notRole := fstest.MapFS{"r.yaml": {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")}}
	if _, err := c.ServiceAccount(t.Context(), "ops", "third", notRole); err == nil || !strings.Contains(err.Error(), `found a "ConfigMap", not a ClusterRole`) {
		t.Errorf("a role file holding a ConfigMap: got %v, want an error naming it", err)
	}
}
