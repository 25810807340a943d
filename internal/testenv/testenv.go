// Package testenv is what kfsm's integration tests share: one cluster per
// test package, a namespace and a manager per test, and polling.
package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kfsm/kfsm/cluster"
)

// Main is the body of a TestMain: it starts a cluster with opts, hands it
// to started, runs the tests, stops the cluster and exits.
func Main(m *testing.M, opts cluster.Options, started func(*cluster.Cluster)) {
	ctx, cancel := context.WithCancel(context.Background())
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	started(c)
	code := m.Run()
	cancel()
	_ = c.Stop()
	os.Exit(code)
}

// Namespace creates a namespace of its own for a test and returns its name.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// StartManager runs a manager whose cache sees only namespace, with what
// setup registers, until the test ends or stop is called. Tests run
// several managers with the same controllers, which controller-runtime
// otherwise refuses as duplicate names.
func StartManager(t testing.TB, cfg *rest.Config, scheme *runtime.Scheme, namespace string, setup ...func(manager.Manager) error) (stop func()) {
	t.Helper()
	return StartManagerWith(t, cfg, scheme, namespace, nil, setup...)
}

// StartManagerWith is StartManager with the manager's options changed by
// configure first, for a logger, a client that counts or a resync period.
func StartManagerWith(t testing.TB, cfg *rest.Config, scheme *runtime.Scheme, namespace string, configure func(*ctrl.Options), setup ...func(manager.Manager) error) (stop func()) {
	t.Helper()
	opts := ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if configure != nil {
		configure(&opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range setup {
		if err := s(mgr); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// Poll waits until cond holds, checking every 50 ms for up to two minutes,
// and fails the test naming what it waited for.
func Poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// ReadmeHasDiagram fails unless README.md in the test's directory holds
// diagram as a Mermaid block, so that a committed diagram stays current.
func ReadmeHasDiagram(t testing.TB, diagram string) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```mermaid\n"+diagram+"```") {
		t.Errorf("README.md does not have the current diagram; it is:\n```mermaid\n%s```", diagram)
	}
}
