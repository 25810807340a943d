//go:build linux

package effects_test

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// One API server, with the sharded list and watch that the handover
// rounds' replicas use, serves every round; each works in a namespace of
// its own.
func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:     []string{filepath.Join("..", "..", "internal", "testapi", "crd")},
		AddToScheme:  []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		FeatureGates: map[string]bool{"ShardedListAndWatch": true},
	})
}
