package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cluster"
)

func newAssetsCommand() *cobra.Command {
	var opts cluster.Options
	cmd := &cobra.Command{
		Use:   "assets",
		Short: "Find, download or build the Kubernetes binaries and print their directory",
		Long: `Assets makes sure that kube-apiserver, etcd and kubectl (and with --workloads
kube-controller-manager, kube-scheduler and kwok) are at hand, then prints
the directory that holds them as the last line of standard output. It takes
kube-apiserver, etcd and kubectl from KUBEBUILDER_ASSETS, setup-envtest's
store or an earlier build, else downloads them as setup-envtest does, and
builds them from the Go module proxy when it cannot; the workloads are
always built. Each choice, and a build's progress, go to standard error; a
build takes several minutes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Progress = cmd.ErrOrStderr()
			a, err := cluster.EnsureAssets(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if a.WorkloadsDir != "" && a.WorkloadsDir != a.Dir {
				fmt.Fprintln(cmd.ErrOrStderr(), "workloads binaries:", a.WorkloadsDir)
			}
			fmt.Fprintln(cmd.OutOrStdout(), a.Dir)
			return nil
		},
	}
	cmd.Flags().BoolVar(&opts.Workloads, "workloads", false, "also build kube-controller-manager, kube-scheduler and kwok")
	return cmd
}
