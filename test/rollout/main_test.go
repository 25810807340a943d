//go:build linux

package rollout_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// One API server, with the sharded list and watch that the sharded
// replicas use, serves every scenario; each works in a namespace of its
// own. Under -short the tests skip, and no API server starts.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:     []string{filepath.Join("..", "..", "internal", "testapi", "crd")},
		AddToScheme:  []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		FeatureGates: map[string]bool{"ShardedListAndWatch": true},
	})
}
