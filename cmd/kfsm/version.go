package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/fsm"
)

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the versions of kfsm, Go and the embedded Kubernetes",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "kfsm %s, built with %s\nkubernetes %s (the embedded cluster)\n",
				fsm.Version(), runtime.Version(), cluster.KubernetesVersion())
		},
	}
}
