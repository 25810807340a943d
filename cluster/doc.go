// Package cluster runs a real Kubernetes control plane on this machine, for
// tests and for the kfsm demo.
//
// The simplest use starts kube-apiserver and etcd and installs CRDs:
//
//	c, err := cluster.Start(ctx, cluster.Options{CRDPaths: []string{"config/crd"}})
//	if err != nil {
//		return err
//	}
//	defer func() { _ = c.Stop() }()
//	cl, err := client.New(c.Config, client.Options{})
//
// ExampleStart shows it whole.
//
// The binaries are real Kubernetes components, at the version pinned in
// kfsm's tools/k8s module, found or made the fastest way the machine
// allows, and each choice is said in one line. kube-apiserver, etcd and
// kubectl come from the first of: a directory that KUBEBUILDER_ASSETS
// names; setup-envtest's store (~/.local/share/kubebuilder-envtest on
// Linux), when it holds that version; an earlier build; a download of
// setup-envtest's release archive into that store, checked against the
// SHA-512 in its index; a build from the Go module proxy (k8s.io/kubernetes
// and etcd). kube-controller-manager, kube-scheduler and kwok, which
// setup-envtest does not have, are always built. A build takes several
// minutes and says how many packages it has compiled of how many; its
// binaries are then cached in the user cache directory and verified on
// each use, and concurrent processes share one build, or one download,
// through a file lock. [EnsureAssets] does this alone; so do the command
// github.com/kfsm/kfsm/cluster/assets, which an operator project's make
// test runs before its tests, and the kfsm command's "assets" subcommand.
//
// The control plane is started by controller-runtime's envtest. With
// [Options.Workloads] the cluster also runs kube-controller-manager,
// kube-scheduler and kwok with fake nodes, so that owner-reference garbage
// collection happens and Deployments become Available with Running pods,
// although no kubelet runs and no container starts.
//
// # Guarantees
//
//   - Start returns a cluster that serves requests, with the CRDs installed
//     and, with Workloads, controllers running and nodes Ready; or an error
//     that names the component that failed with the end of its output, and
//     nothing left running.
//   - Stop, or cancelling the context given to Start, stops every process
//     the cluster started and waits for them to exit. On Linux the kernel
//     also kills every one of them if the calling process dies without
//     stopping it (killed, or ended by go test's timeout): etcd and
//     kube-apiserver through setpriv (util-linux), where it is installed.
//   - A cached binary is used only if it matches what the build produced;
//     an interrupted or damaged build is rebuilt.
//
// # Assumptions
//
//   - For a build, the go command is available (on PATH, or the toolchain
//     this program was built with) and the Go module proxy can be reached.
//   - Unix file locks work in the cache directory.
//
// # Caveats
//
//   - Pods never run containers: kwok only reports them Running. Workloads
//     that must really serve are run by the examples as local processes.
//   - If the calling process is killed outside Linux, or without setpriv,
//     envtest's etcd and kube-apiserver outlive it. On any system, a
//     killed process's directories (the cluster's: etcd's data, the
//     certificates; a WebhookServing's certificate) stay in the temporary
//     directory until the next cluster started on the machine (Linux)
//     removes them. Stop and Close are the clean way out.
package cluster
