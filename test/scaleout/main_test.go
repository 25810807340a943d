//go:build linux

package scaleout_test

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// crdPath holds the test API's CRDs.
var crdPath = filepath.Join("..", "..", "internal", "testapi", "crd")

// One API server, with the sharded list and watch, serves the tests that
// need no other; each works in a namespace of its own.
func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:     []string{crdPath},
		AddToScheme:  []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		FeatureGates: map[string]bool{"ShardedListAndWatch": true},
	})
}
