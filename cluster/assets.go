package cluster

import (
	"context"
	"os/exec"
	"path/filepath"

	"github.com/kfsm/kfsm/cluster/internal/k8smod"
)

// KwokStagesFile is the file in Assets.WorkloadsDir that holds kwok's stages.
const KwokStagesFile = k8smod.KwokStagesFile

// KubernetesVersion is the version of kube-apiserver and the other
// components that kfsm builds.
func KubernetesVersion() string { return k8smod.Version() }

// Assets says where the cluster's binaries are.
type Assets struct {
	// Dir holds kube-apiserver, etcd and, unless it came from
	// KUBEBUILDER_ASSETS without it, kubectl.
	Dir string
	// WorkloadsDir holds kube-controller-manager, kube-scheduler, kwok and
	// KwokStagesFile. It is empty unless the workloads tier was asked for.
	WorkloadsDir string
}

// Kubectl returns the kubectl to show to people: the one in Dir, else the
// one on PATH, else plain "kubectl".
func (a Assets) Kubectl() string {
	if p := filepath.Join(a.Dir, "kubectl"); k8smod.Executable(p) {
		return p
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	return "kubectl"
}

// EnsureAssets returns the directories of the cluster's binaries, finding,
// downloading or building them as the package documentation says, and
// says where each set comes from on opts.Progress. A build takes minutes
// and reports its progress there too. Later calls, from any process, find
// the binaries at once.
func EnsureAssets(ctx context.Context, opts Options) (Assets, error) {
	dir, workloadsDir, err := k8smod.Ensure(ctx, k8smod.Options{Workloads: opts.Workloads, Progress: opts.Progress, CacheDir: opts.CacheDir})
	if err != nil {
		return Assets{}, err
	}
	return Assets{Dir: dir, WorkloadsDir: workloadsDir}, nil
}
