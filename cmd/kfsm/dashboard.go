package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kfsm/kfsm/cmd/internal/dashboard"
)

func newDashboardCommand() *cobra.Command {
	var kubeconfig, kubecontext, address string
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a read-only live web view of the kfsm machines in a cluster",
		Long: `Dashboard serves a web page that shows every kfsm machine that published
its graph in the cluster: the graph, with the number of objects in each state
and the transitions of the last five minutes on each edge, kept live as objects
move. Choose a state to list its objects, and an object to see its timeline
(transitions, with how long it stayed in each state, and its recent events),
its conditions and its children. The search box finds objects by name and by
state:, ns:, cond: and machine: filters.

An arrow counts every transition the dashboard saw in the objects' versions
as they changed, those of objects deleted since included; for the time before
it started, those that the objects' histories keep.

The dashboard only reads: get, list and watch on CustomResourceDefinitions,
on the machines' resources and on events.k8s.io events. It never reads
Secrets, and it refuses any request but GET and HEAD. It serves on a loopback
address unless --address says otherwise, and prints its URL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = kubeconfig
			cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
				&clientcmd.ConfigOverrides{CurrentContext: kubecontext}).ClientConfig()
			if err != nil {
				return fmt.Errorf("reading the kubeconfig: %w", err)
			}
			serve, err := startDashboard(cfg, address, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&kubecontext, "context", "", "the kubeconfig context to use (default: the current one)")
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:0", "the address to serve on; port 0 picks a free one")
	return cmd
}

// startDashboard listens on address for the dashboard of cfg's cluster
// and prints its URL to out; serve then serves it until ctx ends.
func startDashboard(cfg *rest.Config, address string, out io.Writer) (serve func(ctx context.Context) error, err error) {
	d, err := dashboard.New(cfg, dashboard.Options{})
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	fmt.Fprintf(out, "dashboard: http://%s/\n", l.Addr())
	return func(ctx context.Context) error { return d.Serve(ctx, l) }, nil
}
