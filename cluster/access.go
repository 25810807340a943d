package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/internal/manifests"
)

// ServiceAccount creates the ServiceAccount name in namespace (and the
// namespace), installs the ClusterRoles in the .yaml files of roles (as
// controller-gen writes them from +kubebuilder:rbac markers) and binds
// them to it. It returns a configuration that acts as that ServiceAccount,
// with exactly those permissions, as an operator deployed with that role
// has: a permission the role lacks is refused.
func (c *Cluster) ServiceAccount(ctx context.Context, namespace, name string, roles ...fs.FS) (*rest.Config, error) {
	crs, err := manifests.Read[rbacv1.ClusterRole](roles, "ClusterRole")
	if err != nil {
		return nil, err
	}
	if len(crs) == 0 {
		return nil, errors.New("the roles hold no ClusterRole")
	}
	admin, err := client.New(c.Config, client.Options{})
	if err != nil {
		return nil, err
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}},
	}
	for _, r := range crs {
		objs = append(objs, r, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + name + "-" + r.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
		})
	}
	for _, o := range objs {
		// Two ServiceAccounts may share a role, and a namespace.
		if err := admin.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the ServiceAccount %s/%s: creating %T %s: %w", namespace, name, o, o.GetName(), err)
		}
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: ServiceAccountUser(namespace, name)}
	return cfg, nil
}

// ServiceAccountUser is the user name of a ServiceAccount, as the API
// server and admission webhooks see it.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}
