// Command assets finds, downloads or builds the Kubernetes binaries that
// package cluster runs, kube-apiserver, etcd and kubectl (and with
// -workloads kube-controller-manager, kube-scheduler and kwok), as
// package cluster documents, and prints the directory that holds them as
// the last line of standard output. Where each set comes from, a
// download's or a build's progress, and a wait for another process that
// is making them, go to standard error as they happen.
//
// An operator project runs it from its own module, which requires kfsm,
// before its tests:
//
//	go run github.com/kfsm/kfsm/cluster/assets
//
// It is what a test's cluster does on first use, at the version of kfsm
// that the project requires, into the same places. Made inside go test
// instead, a first build, which takes several minutes, would count
// against the test timeout, and go test would hold back its progress
// until the test binary ends. The command imports none of package
// cluster's Kubernetes libraries, so it compiles in seconds, and adds no
// dependency to the project.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kfsm/kfsm/cluster/internal/k8smod"
)

func main() {
	opts := k8smod.Options{Progress: os.Stderr}
	flag.BoolVar(&opts.Workloads, "workloads", false, "also build kube-controller-manager, kube-scheduler and kwok")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	dir, workloadsDir, err := k8smod.Ensure(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "assets:", err)
		os.Exit(1)
	}
	if workloadsDir != "" && workloadsDir != dir {
		fmt.Fprintln(os.Stderr, "workloads binaries:", workloadsDir)
	}
	fmt.Println(dir)
}
