package k8smod

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kfsm/kfsm/cluster/internal/assets"
	"github.com/kfsm/kfsm/cluster/internal/setupenvtest"
	"github.com/kfsm/kfsm/internal/filelock"
)

// What the messages call each set of binaries.
const (
	coreNames      = "kube-apiserver, etcd and kubectl"
	workloadsNames = "kube-controller-manager, kube-scheduler and kwok"
)

// finder finds the binaries, or downloads or builds them.
type finder struct {
	cache           *assets.Cache
	src             assets.Source
	core, workloads assets.Group
	// store is setup-envtest's store, unless storeErr says why there is
	// none.
	store    setupenvtest.Store
	storeErr error
	indexURL string
}

func newFinder(o Options) (*finder, error) {
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
	f := &finder{
		cache:     &assets.Cache{Root: root, Progress: progress},
		src:       source(),
		core:      coreGroup,
		workloads: workloadsGroup,
		store:     setupenvtest.Store{Dir: o.EnvtestStore},
		indexURL:  o.IndexURL,
	}
	if f.store.Dir == "" {
		f.store.Dir, f.storeErr = setupenvtest.DefaultStore()
	}
	if f.indexURL == "" {
		f.indexURL = setupenvtest.DefaultIndexURL
	}
	return f, nil
}

func (f *finder) say(format string, args ...any) {
	fmt.Fprintf(f.cache.Progress, "kfsm: "+format+"\n", args...)
}

func (f *finder) ensure(ctx context.Context, workloads bool) (dir, workloadsDir string, err error) {
	dir, err = f.ensureCore(ctx)
	if err != nil || !workloads {
		return dir, "", err
	}
	if d, ok := f.cache.Cached(f.src, f.workloads); ok {
		f.say("using %s %s, built before, in %s", workloadsNames, f.src.Version, d)
		return dir, d, nil
	}
	f.say("building %s %s from the Go module proxy: setup-envtest has no release of them", workloadsNames, f.src.Version)
	res, err := f.cache.Ensure(ctx, f.src, f.workloads)
	if err != nil {
		return "", "", err
	}
	return dir, res.Dir, nil
}

func (f *finder) ensureCore(ctx context.Context) (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		err := usable(ctx, d)
		if err == nil {
			f.say("using %s from KUBEBUILDER_ASSETS=%s", coreNames, d)
			return d, nil
		}
		f.say("ignoring KUBEBUILDER_ASSETS=%s: %v", d, err)
	}
	if f.storeErr == nil {
		d := f.store.Path(f.src.Version)
		err := usable(ctx, d)
		if err == nil {
			f.say("using %s %s from setup-envtest's store, in %s", coreNames, f.src.Version, d)
			return d, nil
		}
		if _, statErr := os.Stat(d); statErr == nil {
			f.say("ignoring setup-envtest's %s: %v", d, err)
		}
	}
	if d, ok := f.cache.Cached(f.src, f.core); ok {
		f.say("using %s %s, built before, in %s", coreNames, f.src.Version, d)
		return d, nil
	}
	d, err := f.download(ctx)
	if err == nil {
		return d, nil
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	f.say("cannot download %s %s (%v); building them from the Go module proxy", coreNames, f.src.Version, err)
	res, err := f.cache.Ensure(ctx, f.src, f.core)
	return res.Dir, err
}

// download downloads the core binaries into setup-envtest's store, once
// for all the processes that want them at the same time.
func (f *finder) download(ctx context.Context) (string, error) {
	if f.storeErr != nil {
		return "", fmt.Errorf("no setup-envtest store: %w", f.storeErr)
	}
	a, err := setupenvtest.FindArchive(ctx, f.indexURL, f.src.Version)
	if err != nil {
		return "", err
	}
	dir := f.store.Path(f.src.Version)
	if err := os.MkdirAll(f.cache.Root, 0o755); err != nil {
		return "", err
	}
	unlock, err := filelock.Lock(ctx, filepath.Join(f.cache.Root, "envtest-"+filepath.Base(dir)+".lock"), func() {
		f.say("waiting for another process that is downloading %s into %s", coreNames, dir)
	})
	if err != nil {
		return "", err
	}
	defer unlock()
	if usable(ctx, dir) == nil {
		f.say("using %s %s from setup-envtest's store, in %s", coreNames, f.src.Version, dir)
		return dir, nil
	}
	f.say("downloading %s %s from %s into setup-envtest's store, %s", coreNames, f.src.Version, a.URL, dir)
	start := time.Now()
	if _, err := f.store.Install(ctx, a); err != nil {
		return "", err
	}
	if err := usable(ctx, dir); err != nil {
		return "", fmt.Errorf("the downloaded binaries do not run: %w", err)
	}
	f.say("downloaded %s in %s", coreNames, time.Since(start).Round(time.Second))
	return dir, nil
}
