package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

var testCRDs = filepath.Join("..", "internal", "testapi", "crd")

func newClient(t *testing.T, c *cluster.Cluster) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestClusterServesCRDsWithStatusAndStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	before := childProcesses(t)
	c, err := cluster.Start(t.Context(), cluster.Options{CRDPaths: []string{testCRDs}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	started := newProcesses(t, before)
	if len(started) < 2 {
		t.Fatalf("found %d new processes (%v), want etcd and kube-apiserver", len(started), started)
	}

	cl := newClient(t, c)
	ctx := t.Context()
	w := &v1alpha1.Widget{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: metav1.NamespaceDefault},
		Spec:       v1alpha1.WidgetSpec{Size: 3, Color: "red"},
	}
	if err := cl.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	w.Status = v1alpha1.WidgetStatus{Phase: "Ready", ObservedGeneration: w.Generation}
	if err := cl.Status().Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	// Through the main resource, status is ignored: proof of the subresource.
	w.Spec.Size = 4
	w.Status.Phase = "Ignored"
	if err := cl.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.Widget
	if err := cl.Get(ctx, client.ObjectKeyFromObject(w), &got); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.WidgetSpec{Size: 4, Color: "red"}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(v1alpha1.WidgetStatus{Phase: "Ready", ObservedGeneration: 1}, got.Status); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}

	// The CRD's validation is installed: a size out of range is refused.
	bad := &v1alpha1.Widget{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: metav1.NamespaceDefault},
		Spec:       v1alpha1.WidgetSpec{Size: 1000},
	}
	if err := cl.Create(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.size") {
		t.Errorf("creating a widget of size 1000: error = %v, want Invalid naming spec.size", err)
	}

	// The kubeconfig file reaches the same server.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fromFile.Get(ctx, client.ObjectKey{Name: metav1.NamespaceDefault}, &corev1.Namespace{}); err != nil {
		t.Errorf("reading the default namespace with the kubeconfig file: %v", err)
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	if left := alive(started); len(left) > 0 {
		t.Errorf("processes still running after Stop: %v", left)
	}
	if _, err := os.Stat(c.Kubeconfig); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kubeconfig left behind after Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop() = %v, want nil", err)
	}
}

func TestClusterStopsWhenContextIsCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	before := childProcesses(t)
	ctx, cancel := context.WithCancel(t.Context())
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := newProcesses(t, before)
	cancel()
	select {
	case <-c.Done():
	case <-time.After(time.Minute):
		t.Fatal("the cluster did not stop after its context was cancelled")
	}
	if left := alive(started); len(left) > 0 {
		t.Errorf("processes still running after cancel: %v", left)
	}
}

func TestMissingCRDPathFailsAndLeavesNothingRunning(t *testing.T) {
	before := childProcesses(t)
	_, err := cluster.Start(t.Context(), cluster.Options{CRDPaths: []string{filepath.Join(t.TempDir(), "nope")}})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("Start() error = %v, want one naming the missing path", err)
	}
	if left := alive(newProcesses(t, before)); len(left) > 0 {
		t.Errorf("a failed start left processes running: %v", left)
	}
}

func TestWorkloadsRunDeploymentsAndCollectGarbage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	c, err := cluster.Start(t.Context(), cluster.Options{Workloads: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	cl := newClient(t, c)
	ctx := t.Context()

	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}},
			},
		},
	}
	if err := cl.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	poll(t, "the Deployment to become Available with 2 ready replicas", func() (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return false, err
		}
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
				return d.Status.ReadyReplicas == 2, nil
			}
		}
		return false, nil
	})
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels(labels)); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
			running++
		}
	}
	if running != 2 {
		t.Errorf("%d of %d pods are Running on a node, want 2", running, len(pods.Items))
	}

	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: metav1.NamespaceDefault}}
	if err := cl.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	owned := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "owned", Namespace: metav1.NamespaceDefault,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
	}}
	if err := cl.Create(ctx, owned); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, owner); err != nil {
		t.Fatal(err)
	}
	poll(t, "the garbage collector to delete the owned ConfigMap", func() (bool, error) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(owned), owned)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

func TestKubebuilderAssetsIsHonouredWhenUsable(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test needs the Kubernetes binaries, which a fresh machine builds for minutes")
	}
	built, err := cluster.EnsureAssets(t.Context(), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A copy elsewhere, as setup-envtest would leave one.
	envtestDir := t.TempDir()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if err := os.Symlink(filepath.Join(built.Dir, name), filepath.Join(envtestDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]struct {
		dir        string
		want       string
		wantNotice bool
	}{
		"Usable":   {dir: envtestDir, want: envtestDir},
		"Empty":    {dir: t.TempDir(), want: built.Dir, wantNotice: true},
		"NotThere": {dir: filepath.Join(t.TempDir(), "nope"), want: built.Dir, wantNotice: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("KUBEBUILDER_ASSETS", tc.dir)
			var progress bytes.Buffer
			got, err := cluster.EnsureAssets(t.Context(), cluster.Options{Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			if got.Dir != tc.want {
				t.Errorf("Dir = %s, want %s", got.Dir, tc.want)
			}
			if notice := strings.Contains(progress.String(), "ignoring KUBEBUILDER_ASSETS"); notice != tc.wantNotice {
				t.Errorf("notice = %t, want %t; progress:\n%s", notice, tc.wantNotice, progress.String())
			}
		})
	}
}

// TestEmbeddedModuleIsCurrent fails when tools/k8s changed and make
// generate was not run, which would build other versions than pinned.
func TestEmbeddedModuleIsCurrent(t *testing.T) {
	pairs := map[string]string{
		"go.mod":       "go.mod.txt",
		"go.sum":       "go.sum.txt",
		"etcd/main.go": "etcd.go.txt",
	}
	for src, copied := range pairs {
		want, err := os.ReadFile(filepath.Join("..", "tools", "k8s", src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("internal", "k8smod", copied))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("internal/k8smod/%s differs from tools/k8s/%s; run make generate", copied, src)
		}
	}
	if v := cluster.KubernetesVersion(); !strings.HasPrefix(v, "v1.36.") {
		t.Errorf("KubernetesVersion() = %q, want v1.36.x", v)
	}
}

func poll(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// childProcesses lists the processes whose parent is this test process.
func childProcesses(t *testing.T) map[int]bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to inspect processes: %v", err)
	}
	children := map[int]bool{}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, state, ok := procStat(pid); ok && ppid == self && state != "Z" {
			children[pid] = true
		}
	}
	return children
}

func newProcesses(t *testing.T, before map[int]bool) []int {
	t.Helper()
	var pids []int
	for pid := range childProcesses(t) {
		if !before[pid] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive returns those of pids that still run (zombies count as gone).
func alive(pids []int) []string {
	var left []string
	for _, pid := range pids {
		if _, state, ok := procStat(pid); ok && state != "Z" {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			left = append(left, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
		}
	}
	return left
}

func procStat(pid int) (ppid int, state string, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", false
	}
	// The command name is in parentheses and may contain spaces.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, fields[0], err == nil
}

func TestAPIServerThatFailsIsNamedWithItsOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test needs the Kubernetes binaries, which a fresh machine builds for minutes")
	}
	built, err := cluster.EnsureAssets(t.Context(), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A kube-apiserver that passes the usability check but cannot serve.
	dir := t.TempDir()
	script := "#!/bin/sh\n[ \"$1\" = --version ] && { echo Kubernetes v1.36.3; exit 0; }\n" +
		"[ \"$1\" = --help ] && exit 0\n" +
		"echo 'failed to create listener: bind: address already in use' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "kube-apiserver"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(built.Dir, "etcd"), filepath.Join(dir, "etcd")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", dir)

	before := childProcesses(t)
	_, err = cluster.Start(t.Context(), cluster.Options{})
	if err == nil {
		t.Fatal("Start() succeeded with a kube-apiserver that cannot start")
	}
	for _, want := range []string{"kube-apiserver", "address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start() error does not say %q:\n%v", want, err)
		}
	}
	if left := alive(newProcesses(t, before)); len(left) > 0 {
		t.Errorf("a failed start left processes running: %v", left)
	}
}
