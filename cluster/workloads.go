package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// NodeLabel marks the fake nodes that kwok runs pods on.
const NodeLabel = "kfsm.dev/fake-node"

// startWorkloads starts the components that make workloads run, then waits
// until the controllers act and the fake nodes are Ready.
func (c *Cluster) startWorkloads(ctx context.Context, nodes int) error {
	bin := func(name string) string { return filepath.Join(c.Assets.WorkloadsDir, name) }
	specs := []struct {
		name string
		args []string
	}{
		// The service account token controller needs a signing key, which
		// nothing here uses; every other controller runs.
		{"kube-controller-manager", []string{"--kubeconfig=" + c.Kubeconfig, "--controllers=*,-serviceaccount-token", "--leader-elect=false", "--secure-port=0"}},
		{"kube-scheduler", []string{"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--secure-port=0"}},
		{"kwok", []string{"--kubeconfig=" + c.Kubeconfig, "--manage-all-nodes=true", "--config=" + bin(KwokStagesFile), "--server-address="}},
	}
	for _, s := range specs {
		comp, err := startComponent(s.name, bin(s.name), c.dir, s.args...)
		if err != nil {
			return err
		}
		c.components = append(c.components, comp)
	}

	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	for i := range nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, fakeNode(fmt.Sprintf("kwok-node-%d", i)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating fake node: %w", err)
		}
	}
	// The default service account shows that the controller manager runs
	// its controllers; Ready nodes show that kwok manages them.
	if err := c.waitFor(ctx, "kube-controller-manager to create the default service account", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return err
	}
	return c.waitFor(ctx, "kwok to make the fake nodes Ready", func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel})
		if err != nil {
			return false, err
		}
		for _, n := range list.Items {
			if !nodeReady(&n) {
				return false, nil
			}
		}
		return len(list.Items) == nodes, nil
	})
}

// waitFor polls cond until it holds, a component exits, or a minute passes.
func (c *Cluster) waitFor(ctx context.Context, what string, cond wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, comp := range c.components {
			if err := comp.exitErr(); err != nil {
				return false, err
			}
		}
		return cond(ctx)
	})
	if err == nil {
		return nil
	}
	var exited *exitError
	if errors.As(err, &exited) {
		return err
	}
	return fmt.Errorf("waiting for %s: %w%s", what, err, c.componentLogs())
}

func (c *Cluster) componentLogs() string {
	var s string
	for _, comp := range c.components {
		s += comp.log.section(comp.name)
	}
	return s
}

func fakeNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				NodeLabel:                name,
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"type":                   "kwok",
			},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// component is a process of the workloads tier.
type component struct {
	name   string
	cmd    *exec.Cmd
	log    *tail
	exited chan struct{}
	err    error // set before exited is closed
}

type exitError struct {
	name string
	err  error
	log  string
}

func (e *exitError) Error() string {
	return fmt.Sprintf("%s exited: %v%s", e.name, e.err, e.log)
}

func startComponent(name, path, dir string, args ...string) (*component, error) {
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	comp := &component{name: name, log: &tail{}, exited: make(chan struct{})}
	comp.cmd = exec.Command(path, args...)
	comp.cmd.Stdout = io.MultiWriter(logFile, comp.log)
	comp.cmd.Stderr = comp.cmd.Stdout
	comp.cmd.SysProcAttr = componentProcAttr()
	if err := comp.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		err := comp.cmd.Wait()
		_ = logFile.Close()
		if err == nil {
			err = errors.New("exit status 0")
		}
		comp.err = &exitError{name: name, err: err, log: comp.log.section(name)}
		close(comp.exited)
	}()
	return comp, nil
}

// exitErr says why the component exited, or nil while it runs.
func (comp *component) exitErr() error {
	select {
	case <-comp.exited:
		return comp.err
	default:
		return nil
	}
}

// stop asks the component to exit and kills it if it does not within ten
// seconds. It returns once the process is gone.
func (comp *component) stop() error {
	select {
	case <-comp.exited:
		return nil
	default:
	}
	_ = comp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-comp.exited:
	case <-time.After(10 * time.Second):
		_ = comp.cmd.Process.Kill()
		<-comp.exited
		return fmt.Errorf("%s did not exit within 10s of SIGTERM and was killed", comp.name)
	}
	return nil
}
