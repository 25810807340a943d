package fsmtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/internal/coverage"
	"github.com/kfsm/kfsm/internal/manifests"
)

var (
	coverProfile = flag.String("kfsm.coverprofile", "", "write the edge coverage of the package's kfsm machines to this file")
	coverMin     = flag.Float64("kfsm.covermin", 0, "fail the package when a machine's edge coverage, in percent, is below this")
)

// CoverDirEnv names an environment variable: when set to an absolute path,
// every test package that runs Main writes its edge coverage profile into
// that directory (made if need be), so that `go test ./...` leaves one
// profile per package for `kfsm cover` to merge.
const CoverDirEnv = "KFSM_COVERDIR"

// Options say what a test package needs of its cluster.
type Options struct {
	// CRDPaths are files or directories of CustomResourceDefinitions.
	CRDPaths []string
	// CRDs are file systems, such as an embed.FS, whose .yaml files hold
	// CustomResourceDefinitions.
	CRDs []fs.FS
	// AddToScheme registers the package's types; client-go's types are
	// always registered.
	AddToScheme []func(*runtime.Scheme) error
	// Workloads adds the workloads tier (garbage collection, the
	// Deployment controller, the scheduler and fake nodes); see
	// cluster.Options.
	Workloads bool
	// FeatureGates turns kube-apiserver's feature gates on or off; see
	// cluster.Options.
	FeatureGates map[string]bool
	// MinCoverage fails the package when a machine's edge coverage, in
	// percent, is below it, unless -run or -skip chose the tests. The
	// -kfsm.covermin flag overrides it. A graph of an earlier version of
	// a machine whose later version the tests also ran (the last
	// release's machine, kept to test the migration from it) is not held
	// to it.
	MinCoverage float64
	// Roles are file systems whose .yaml files hold ClusterRoles, such as
	// controller-gen writes from +kubebuilder:rbac markers. When set, every
	// operator that Run starts acts as the ServiceAccount OperatorUser,
	// bound to these roles and nothing else, as it would in a cluster: a
	// permission the role lacks fails the test. Without them operators act
	// as a member of system:masters, which may do anything.
	Roles []fs.FS
	// Logger receives what controller-runtime and kfsm log; the default
	// discards it.
	Logger logr.Logger
}

// pkg is the test package's cluster and what all its tests share.
var pkg struct {
	// start starts the cluster, on the first call of started: nil under
	// -short. cluster and operatorAs are set once it has run.
	start      func() error
	starting   sync.Once
	startErr   error
	cluster    *cluster.Cluster
	scheme     *runtime.Scheme
	operatorAs rest.ImpersonationConfig // whom operators act as; empty for the cluster's admin

	mu       sync.Mutex
	envs     map[string]*Env // by namespace
	observed map[any]bool    // machines whose walks are recorded
	profile  *coverage.Profile
}

// Main is the whole of a test package's TestMain: it runs the tests with a
// real API server (etcd and kube-apiserver, and the workloads tier if
// asked) and the CRDs installed, reports the edge coverage of the machines
// they ran, stops the cluster and exits. The cluster starts when the first
// test that needs it calls New, so that benchmarks, and tests that need
// none, run on a machine that no API server shares. With -short it starts
// no API server: the tests that need none run, and New skips the others.
//
//	func TestMain(m *testing.M) {
//		fsmtest.Main(m, fsmtest.Options{CRDs: []fs.FS{moose.CRDs}, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
//	}
func Main(m *testing.M, opts Options) {
	os.Exit(runMain(m, opts))
}

func runMain(m *testing.M, opts Options) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		// make check: the tests that need no API server run, and New
		// skips the others.
		return m.Run()
	}
	logger := opts.Logger
	if logger.GetSink() == nil {
		logger = logr.Discard()
	}
	logf.SetLogger(logger)
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, opts.AddToScheme...) {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, "fsmtest: registering types:", err)
			return 1
		}
	}
	crds, err := manifests.Read[apiextensionsv1.CustomResourceDefinition](opts.CRDs, "CustomResourceDefinition")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fsmtest:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pkg.start = func() error {
		c, err := cluster.Start(ctx, cluster.Options{CRDPaths: opts.CRDPaths, Workloads: opts.Workloads, FeatureGates: opts.FeatureGates})
		if err != nil {
			return err
		}
		if len(crds) > 0 {
			if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
				return fmt.Errorf("installing CRDs: %w", errors.Join(err, c.Stop()))
			}
		}
		if len(opts.Roles) > 0 {
			cfg, err := c.ServiceAccount(ctx, OperatorNamespace, OperatorServiceAccount, opts.Roles...)
			if err != nil {
				return fmt.Errorf("the operator's role: %w", errors.Join(err, c.Stop()))
			}
			pkg.operatorAs = cfg.Impersonate
		}
		pkg.cluster = c
		return nil
	}
	pkg.scheme = scheme
	pkg.envs, pkg.observed, pkg.profile = map[string]*Env{}, map[any]bool{}, coverage.New()

	code := m.Run()
	if pkg.cluster != nil {
		if err := pkg.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "fsmtest: stopping the cluster:", err)
			code = max(code, 1)
		}
	}
	if err := reportCoverage(os.Stdout, opts.MinCoverage); err != nil {
		fmt.Fprintln(os.Stderr, "fsmtest:", err)
		code = max(code, 1)
	}
	return code
}

// started starts the package's cluster on its first call and returns it:
// nil under -short, or without fsmtest.Main. err is why it did not start.
func started() (*cluster.Cluster, error) {
	pkg.starting.Do(func() {
		if pkg.start != nil {
			if err := pkg.start(); err != nil {
				pkg.startErr = fmt.Errorf("fsmtest: starting the cluster: %w", err)
			}
		}
	})
	return pkg.cluster, pkg.startErr
}

// reportCoverage prints the edge coverage of the machines that the tests
// ran, writes the profile where asked, and fails under the threshold.
func reportCoverage(w io.Writer, minimum float64) error {
	p := pkg.profile
	if len(p.Machines()) == 0 {
		return nil
	}
	fmt.Fprint(w, p.Summary())
	var errs []error
	if *coverProfile != "" {
		errs = append(errs, writeProfile(*coverProfile, p))
	}
	if dir := os.Getenv(CoverDirEnv); dir != "" {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("%s=%s: the directory must be an absolute path, since each package's tests run in the package's directory", CoverDirEnv, dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		f, err := os.CreateTemp(dir, "kfsm-*.cover")
		if err == nil {
			_, err = p.WriteTo(f)
			err = errors.Join(err, f.Close())
		}
		errs = append(errs, err)
	}
	switch {
	case flagSet("kfsm.covermin"):
		minimum = *coverMin
	case minimum > 0 && (flagSet("test.run") || flagSet("test.skip")):
		// Some tests ran, so some edges were taken: no threshold applies.
		fmt.Fprintf(w, "edge coverage threshold of %g%% not checked: -run or -skip chose the tests\n", minimum)
		minimum = 0
	}
	if minimum > 0 {
		var under []string
		for _, name := range p.Machines() {
			if p.Superseded(name) {
				continue
			}
			taken, total := p.Covered(name)
			if total > 0 && float64(taken)*100 < minimum*float64(total) {
				under = append(under, fmt.Sprintf("%s (%d/%d)", p.Label(name), taken, total))
			}
		}
		if len(under) > 0 {
			errs = append(errs, fmt.Errorf("edge coverage under %g%%: %s", minimum, strings.Join(under, ", ")))
		}
	}
	return errors.Join(errs...)
}

func writeProfile(name string, p *coverage.Profile) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	_, err = p.WriteTo(f)
	return errors.Join(err, f.Close())
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
