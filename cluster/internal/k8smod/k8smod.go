// Package k8smod builds the binaries that package cluster runs from the
// module that pins their versions, embedded here: kube-apiserver, etcd and
// kubectl, and for the workloads tier kube-controller-manager,
// kube-scheduler and kwok. It imports no Kubernetes package, so that a
// program that only builds them, such as the command
// github.com/kfsm/kfsm/cluster/assets, compiles in seconds.
//
// The module lives in tools/k8s, where it is edited with the usual go
// commands; make generate copies it here so that package cluster can build
// it wherever it is imported.
package k8smod

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kfsm/kfsm/cluster/internal/assets"
)

//go:embed go.mod.txt go.sum.txt etcd.go.txt
var module embed.FS

// kwokStages are the kwok stage files, from the kwok module, that make fake
// nodes Ready and keep them so, and move pods through their lifecycle.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat/node-heartbeat.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// KwokStagesFile is the file among the workloads binaries that holds
// kwok's stages.
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

func read(name string) []byte {
	data, err := module.ReadFile(name)
	if err != nil {
		panic(err) // embedded at compile time; cannot be missing
	}
	return data
}

func source() assets.Source {
	gomod := read("go.mod.txt")
	return assets.Source{
		Name:    "k8s",
		Version: versionIn(gomod),
		Files: map[string][]byte{
			"go.mod":       gomod,
			"go.sum":       read("go.sum.txt"),
			"etcd/main.go": read("etcd.go.txt"),
		},
	}
}

var kubernetesVersion = regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v[0-9.]+)`)

// Version is the version of kube-apiserver and the other components that
// the module pins.
func Version() string { return versionIn(read("go.mod.txt")) }

func versionIn(gomod []byte) string {
	m := kubernetesVersion.FindSubmatch(gomod)
	if m == nil {
		panic("the embedded Kubernetes module does not require k8s.io/kubernetes")
	}
	return string(m[1])
}

// Options say which binaries to build, and where.
type Options struct {
	// Workloads adds the workloads tier.
	Workloads bool
	// Progress receives build progress and notices; nil means standard
	// error.
	Progress io.Writer
	// CacheDir is where binaries are built and kept; empty means the kfsm
	// folder of the user cache directory.
	CacheDir string
}

// Ensure returns the directories of the binaries, building them from the
// Go module proxy the first time: dir holds kube-apiserver, etcd and
// kubectl, and workloadsDir, with Workloads, the workloads tier. When
// KUBEBUILDER_ASSETS names a directory with a working kube-apiserver and
// etcd, dir is that one.
func Ensure(ctx context.Context, opts Options) (dir, workloadsDir string, err error) {
	cache, err := opts.cache()
	if err != nil {
		return "", "", err
	}
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		if err := usable(ctx, d); err != nil {
			fmt.Fprintf(cache.Progress, "kfsm: ignoring KUBEBUILDER_ASSETS=%s: %v\n", d, err)
		} else {
			dir = d
		}
	}
	src := source()
	if dir == "" {
		res, err := cache.Ensure(ctx, src, coreGroup)
		if err != nil {
			return "", "", err
		}
		dir = res.Dir
	}
	if opts.Workloads {
		res, err := cache.Ensure(ctx, src, workloadsGroup)
		if err != nil {
			return "", "", err
		}
		workloadsDir = res.Dir
	}
	return dir, workloadsDir, nil
}

// usable reports why dir cannot serve as the control plane's binaries.
func usable(ctx context.Context, dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if !Executable(filepath.Join(dir, name)) {
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

// Executable reports whether path is a regular file that may be run.
func Executable(path string) bool {
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
