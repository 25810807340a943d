package fsmtest

import (
	"context"
	"fmt"
	"io/fs"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The ServiceAccount that operators run as when Options.Roles is set.
const (
	OperatorNamespace      = "fsmtest-operator"
	OperatorServiceAccount = "operator"
)

// OperatorUser is the user name of operators run under Options.Roles, as
// the API server and admission webhooks see it.
const OperatorUser = "system:serviceaccount:" + OperatorNamespace + ":" + OperatorServiceAccount

// installRoles creates the operator's ServiceAccount and binds it to the
// ClusterRoles in fss, and to nothing else.
func installRoles(ctx context.Context, cfg *rest.Config, fss []fs.FS) error {
	roles, err := readManifests[rbacv1.ClusterRole](fss, "ClusterRole")
	if err != nil {
		return err
	}
	if len(roles) == 0 {
		return fmt.Errorf("Options.Roles holds no ClusterRole")
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: OperatorServiceAccount, Namespace: OperatorNamespace}},
	}
	for _, r := range roles {
		objs = append(objs, r, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "fsmtest-operator-" + r.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: OperatorServiceAccount, Namespace: OperatorNamespace}},
		})
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("installing the operator's role: creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
