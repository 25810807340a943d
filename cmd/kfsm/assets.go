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
		Short: "Build or find the Kubernetes binaries and print their directory",
		Long: `Assets makes sure that kube-apiserver, etcd and kubectl (and with --workloads
kube-controller-manager, kube-scheduler and kwok) are built and cached, then
prints the directory that holds them as the last line of standard output.
The first build takes several minutes; progress goes to standard error.`,
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
