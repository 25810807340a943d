package cluster

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kfsm/kfsm/cluster/internal/assets"
)

// The module that pins Kubernetes and etcd lives in tools/k8s, where it is
// edited with the usual go commands; make generate copies it here so that
// the cluster package can build it wherever it is imported.
//
//go:embed internal/k8smod/go.mod.txt internal/k8smod/go.sum.txt internal/k8smod/etcd.go.txt
var k8sModule embed.FS

// kwokStages are the kwok stage files, from the kwok module, that make fake
// nodes Ready and keep them so, and move pods through their lifecycle.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat/node-heartbeat.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// KwokStagesFile is the file in Assets.WorkloadsDir that holds kwok's stages.
const KwokStagesFile = "kwok-stages.yaml"

var (
	coreGroup = assets.Group{
		Name:     "core",
		Packages: []string{"k8s.io/kubernetes/cmd/kube-apiserver", "./etcd", "k8s.io/kubernetes/cmd/kubectl"},
		Binaries: []string{"kube-apiserver", "etcd", "kubectl"},
	}
	workloadsGroup = assets.Group{
		Name:     "workloads",
		Packages: []string{"k8s.io/kubernetes/cmd/kube-controller-manager", "k8s.io/kubernetes/cmd/kube-scheduler", "sigs.k8s.io/kwok/cmd/kwok"},
		Binaries: []string{"kube-controller-manager", "kube-scheduler", "kwok", KwokStagesFile},
		Finish:   writeKwokStages,
	}
)

func writeKwokStages(ctx context.Context, b *assets.Build) error {
	out, err := b.Go(ctx, "locating the kwok module", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok")
	if err != nil {
		return err
	}
	dir := strings.TrimSpace(string(out))
	var stages bytes.Buffer
	for _, name := range kwokStages {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return fmt.Errorf("reading kwok stage: %w", err)
		}
		stages.WriteString("---\n")
		stages.Write(data)
	}
	return os.WriteFile(filepath.Join(b.OutDir, KwokStagesFile), stages.Bytes(), 0o644)
}

func k8sSource() assets.Source {
	read := func(name string) []byte {
		data, err := k8sModule.ReadFile("internal/k8smod/" + name)
		if err != nil {
			panic(err) // embedded at compile time; cannot be missing
		}
		return data
	}
	gomod := read("go.mod.txt")
	return assets.Source{
		Name:    "k8s",
		Version: kubernetesVersionIn(gomod),
		Files: map[string][]byte{
			"go.mod":       gomod,
			"go.sum":       read("go.sum.txt"),
			"etcd/main.go": read("etcd.go.txt"),
		},
	}
}

var kubernetesVersion = regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v[0-9.]+)`)

// KubernetesVersion is the version of kube-apiserver and the other
// components that kfsm builds.
func KubernetesVersion() string {
	gomod, err := k8sModule.ReadFile("internal/k8smod/go.mod.txt")
	if err != nil {
		panic(err)
	}
	return kubernetesVersionIn(gomod)
}

func kubernetesVersionIn(gomod []byte) string {
	m := kubernetesVersion.FindSubmatch(gomod)
	if m == nil {
		panic("the embedded Kubernetes module does not require k8s.io/kubernetes")
	}
	return string(m[1])
}

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
	if p := filepath.Join(a.Dir, "kubectl"); isExecutable(p) {
		return p
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	return "kubectl"
}

// EnsureAssets returns the directories of the cluster's binaries, building
// them from the Go module proxy the first time. The build takes minutes;
// progress goes to opts.Progress. Later calls, from any process, verify the
// cached binaries and return at once.
//
// When KUBEBUILDER_ASSETS names a directory with a working kube-apiserver and
// etcd (as setup-envtest leaves it), those are used instead of a build.
func EnsureAssets(ctx context.Context, opts Options) (Assets, error) {
	cache, err := opts.cache()
	if err != nil {
		return Assets{}, err
	}
	var a Assets
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		if err := usableAssets(ctx, dir); err != nil {
			fmt.Fprintf(cache.Progress, "kfsm: ignoring KUBEBUILDER_ASSETS=%s: %v\n", dir, err)
		} else {
			a.Dir = dir
		}
	}
	src := k8sSource()
	if a.Dir == "" {
		res, err := cache.Ensure(ctx, src, coreGroup)
		if err != nil {
			return Assets{}, err
		}
		a.Dir = res.Dir
	}
	if opts.Workloads {
		res, err := cache.Ensure(ctx, src, workloadsGroup)
		if err != nil {
			return Assets{}, err
		}
		a.WorkloadsDir = res.Dir
	}
	return a, nil
}

// usableAssets reports why dir cannot serve as the control plane's binaries.
func usableAssets(ctx context.Context, dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if !isExecutable(filepath.Join(dir, name)) {
			return fmt.Errorf("no executable %s there", name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "kube-apiserver"), "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kube-apiserver --version failed: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func (o Options) cache() (*assets.Cache, error) {
	root := o.CacheDir
	if root == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("finding a cache directory for the cluster binaries (set Options.CacheDir): %w", err)
		}
		root = filepath.Join(dir, "kfsm")
	}
	progress := o.Progress
	if progress == nil {
		progress = os.Stderr
	}
	return &assets.Cache{Root: root, Progress: progress}, nil
}
