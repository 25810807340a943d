// Package k8smod provides the binaries that package cluster runs, at the
// versions that a module embedded here pins: kube-apiserver, etcd and
// kubectl, found or downloaded as setup-envtest does or built from that
// module, and for the workloads tier kube-controller-manager,
// kube-scheduler and kwok, built. It imports no Kubernetes package, so
// that a program that only provides them, such as the command
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

// Options say which binaries to find or build, and where.
type Options struct {
	// Workloads adds the workloads tier.
	Workloads bool
	// Progress receives the choices made, build progress and notices;
	// nil means standard error.
	Progress io.Writer
	// CacheDir is where binaries are built and kept; empty means the kfsm
	// folder of the user cache directory.
	CacheDir string
	// EnvtestStore is setup-envtest's store, where binaries are looked for
	// and downloaded to; empty means setup-envtest's default on this
	// system.
	EnvtestStore string
	// IndexURL is setup-envtest's index of release archives; empty means
	// the one setup-envtest reads.
	IndexURL string
}

// Ensure returns the directories of the binaries, found or made the
// fastest way this machine allows: dir holds kube-apiserver, etcd and
// kubectl, and workloadsDir, with Workloads, the workloads tier. It says
// on opts.Progress, in one line, where it takes each set from.
//
// The control plane's binaries come from the first of these that works:
// a directory that KUBEBUILDER_ASSETS names; setup-envtest's store, when
// it holds the version that kfsm pins; the binaries that an earlier call
// built; a download of setup-envtest's release archive, checked against
// the SHA-512 in its index, into that store; a build from the Go module
// proxy. setup-envtest's archives do not hold the workloads tier, which
// is always built.
func Ensure(ctx context.Context, opts Options) (dir, workloadsDir string, err error) {
	f, err := newFinder(opts)
	if err != nil {
		return "", "", err
	}
	return f.ensure(ctx, opts.Workloads)
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
