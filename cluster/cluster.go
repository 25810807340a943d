package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options configure a cluster and the binaries it runs.
type Options struct {
	// CRDPaths are files or directories of CustomResourceDefinition
	// manifests, installed before Start returns. A missing path is an error.
	CRDPaths []string

	// Workloads adds kube-controller-manager (garbage collection, the
	// Deployment and ReplicaSet controllers and the rest), kube-scheduler
	// and kwok with fake nodes, so that Deployments become Available and
	// their Pods Running without a kubelet. It costs a larger first build
	// and a few seconds per start; leave it off when no workload runs.
	Workloads bool
	// Nodes is the number of fake nodes with Workloads; zero means one.
	Nodes int

	// FeatureGates turns kube-apiserver's feature gates on or off, such as
	// {"ShardedListAndWatch": true} for the alpha sharded list and watch.
	// An unknown gate fails Start with kube-apiserver's message.
	FeatureGates map[string]bool

	// Progress receives where the binaries come from, a build's progress
	// and notices; nil means standard error.
	Progress io.Writer
	// CacheDir is where binaries are built and kept; empty means the kfsm
	// folder of the user cache directory.
	CacheDir string
}

// Cluster is a running Kubernetes control plane.
type Cluster struct {
	// Config reaches the API server as a member of system:masters, with a
	// bearer token.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for the same user. It is
	// removed by Stop.
	Kubeconfig string
	// Assets are the binaries the cluster runs.
	Assets Assets

	env        *envtest.Environment
	dir        string
	components []*component

	stopOnce sync.Once
	stopErr  error
	stopped  chan struct{}
}

// Start builds the binaries if needed, starts etcd and kube-apiserver (and
// with Options.Workloads the workloads tier), installs the CRDs and returns
// once the cluster serves requests. The cluster stops when Stop is called or
// ctx is cancelled, whichever comes first.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	for _, p := range opts.CRDPaths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("CRD path: %w", err)
		}
	}
	a, err := EnsureAssets(ctx, opts)
	if err != nil {
		return nil, err
	}
	removeAbandoned()
	dir, err := ownedDir()
	if err != nil {
		return nil, fmt.Errorf("creating the cluster's directory: %w", err)
	}
	c := &Cluster{Assets: a, dir: dir, stopped: make(chan struct{})}
	if err := c.start(ctx, opts); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	go func() {
		select {
		case <-ctx.Done():
			_ = c.Stop()
		case <-c.stopped:
		}
	}()
	return c, nil
}

// A cluster's directory, in the temporary directory, is named with
// dirPrefix and holds ownerFile, which names the process that started it;
// so is the directory of a webhook server's certificate.
const (
	dirPrefix = "kfsm-cluster-"
	ownerFile = "owner"
)

// ownedDir makes a directory in the temporary directory that
// removeAbandoned removes once this process is gone.
func ownedDir() (string, error) {
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner(os.Getpid())), 0o600); err != nil {
		return "", errors.Join(err, os.RemoveAll(dir))
	}
	return dir, nil
}

// owner names the process pid of this machine's process ID namespace, as
// ownerFile holds it: a temporary directory may be shared with processes
// of another namespace (a container's), whose IDs mean nothing here.
func owner(pid int) string { return strconv.Itoa(pid) + " " + pidNamespace() }

// removeAbandoned removes the directories of clusters and webhook
// certificates whose process died without stopping or closing them
// (killed, or ended by go test's timeout), etcd's data among them: a
// directory whose owner is not named, is of another namespace or still
// runs is left alone.
func removeAbandoned() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		id, _, _ := strings.Cut(string(data), " ")
		if pid, err := strconv.Atoi(id); err == nil && pid > 0 && pidNamespace() != "" && owner(pid) == string(data) && processGone(pid) {
			_ = os.RemoveAll(d)
		}
	}
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	apiServer, err := diesWithCaller(c.dir, filepath.Join(c.Assets.Dir, "kube-apiserver"))
	if err != nil {
		return err
	}
	etcd, err := diesWithCaller(c.dir, filepath.Join(c.Assets.Dir, "etcd"))
	if err != nil {
		return err
	}
	// etcd's data and the API server's certificates are kept in the
	// cluster's directory, which Stop removes: the directories envtest
	// makes itself stay behind when a start fails or the caller dies.
	dataDir, certDir := filepath.Join(c.dir, "etcd-data"), filepath.Join(c.dir, "certificates")
	for _, d := range []string{dataDir, certDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("creating the cluster's directory: %w", err)
		}
	}
	apiLog, etcdLog := &tail{}, &tail{}
	c.env = &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer:   &envtest.APIServer{Path: apiServer, CertDir: certDir, Err: apiLog, Out: apiLog},
			Etcd:        &envtest.Etcd{Path: etcd, DataDir: dataDir, Err: etcdLog, Out: etcdLog},
			KubectlPath: c.Assets.Kubectl(),
		},
		CRDDirectoryPaths:        opts.CRDPaths,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	if gates := featureGates(opts.FeatureGates); gates != "" {
		c.env.ControlPlane.APIServer.Configure().Set("feature-gates", gates)
	}
	// The admin user presents a bearer token rather than envtest's client
	// certificate: the API server verifies a client certificate's chain on
	// every request, about 6 % of its CPU under the tests.
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return fmt.Errorf("making the admin user's token: %w", err)
	}
	tokens := filepath.Join(c.dir, "tokens.csv")
	if err := os.WriteFile(tokens, fmt.Appendf(nil, "%x,kfsm,kfsm,system:masters\n", token), 0o600); err != nil {
		return fmt.Errorf("writing the admin user's token: %w", err)
	}
	c.env.ControlPlane.APIServer.Configure().Set("token-auth-file", tokens)
	if _, err := c.env.Start(); err != nil {
		// envtest's error names the process that failed; its output says why.
		logs := apiLog.section("kube-apiserver")
		if strings.Contains(err.Error(), "process etcd") {
			logs = etcdLog.section("etcd")
		}
		return fmt.Errorf("starting etcd and kube-apiserver: %w%s", err, logs)
	}
	if err := adopt(&c.env.WebhookInstallOptions, c.dir); err != nil {
		return fmt.Errorf("moving envtest's webhook certificate into the cluster's directory: %w", err)
	}
	c.Config = &rest.Config{
		Host:            c.env.Config.Host,
		BearerToken:     fmt.Sprintf("%x", token),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.env.Config.CAData},
	}
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	kubeconfig := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"kfsm": {Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"kfsm": {Token: c.Config.BearerToken}},
		Contexts:       map[string]*clientcmdapi.Context{"kfsm": {Cluster: "kfsm", AuthInfo: "kfsm"}},
		CurrentContext: "kfsm",
	}
	if err := clientcmd.WriteToFile(kubeconfig, c.Kubeconfig); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	if opts.Workloads {
		return c.startWorkloads(ctx, max(opts.Nodes, 1))
	}
	return nil
}

// featureGates is the value of kube-apiserver's --feature-gates, in the
// order of the gates' names.
func featureGates(gates map[string]bool) string {
	names := slices.Sorted(maps.Keys(gates))
	for i, n := range names {
		names[i] = n + "=" + strconv.FormatBool(gates[n])
	}
	return strings.Join(names, ",")
}

// Stop stops every component of the cluster, waits for the processes to
// exit and removes the cluster's files. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for i := len(c.components) - 1; i >= 0; i-- {
			errs = append(errs, c.components[i].stop())
		}
		if c.env != nil && c.env.ControlPlane.APIServer != nil {
			if err := c.env.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
			}
		}
		errs = append(errs, os.RemoveAll(c.dir))
		c.stopErr = errors.Join(errs...)
		close(c.stopped)
	})
	return c.stopErr
}

// Done is closed once the cluster has stopped.
func (c *Cluster) Done() <-chan struct{} { return c.stopped }

// tail keeps the last lines a process wrote, to explain why it failed.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 4096

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

// section formats the tail for an error message, or nothing if empty.
func (t *tail) section(name string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return ""
	}
	return fmt.Sprintf("\n--- last output of %s ---\n%s", name, t.buf)
}
