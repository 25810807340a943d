package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
)

// Start a real API server with a CRD installed, and talk to it with a
// controller-runtime client.
func ExampleStart() {
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Options{
		CRDPaths: []string{"../internal/testapi/crd"},
		Progress: io.Discard, // the first run builds the binaries; say nothing
	})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = c.Stop() }()

	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var ns corev1.Namespace
	if err := cl.Get(ctx, client.ObjectKey{Name: "default"}, &ns); err != nil {
		log.Fatal(err)
	}
	fmt.Println(ns.Name, ns.Status.Phase)
	// Output: default Active
}
