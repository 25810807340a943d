package fsmtest_test

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

func TestMain(m *testing.M) {
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:    []string{filepath.Join("..", "internal", "testapi", "crd"), filepath.Join("testdata", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
}
