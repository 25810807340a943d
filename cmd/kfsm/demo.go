package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kfsm/kfsm/cluster"
)

func newDemoCommand() *cobra.Command {
	var (
		opts             cluster.Options
		duration         time.Duration
		dashboardAddress string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the kfsm demo on an embedded Kubernetes",
		Long: `Demo starts a real kube-apiserver and etcd on this machine, writes a
kubeconfig for them and prints how to reach them with kubectl. It installs the
CRDs of the four example operators (moose, web apps, auto-updated clients and
databases) and runs the operators in one manager, with the servers they talk to
on loopback: a DNS registry, a gRPC version server, client instances and a
database agent. It creates a herd of 25 moose, two web apps, a managed client
and a database, plays a short story of releases and database requests, and
prints every transition. It serves the dashboard, a live web view of the
machines, and prints its address. It runs until interrupted or until
--duration has passed, then shuts everything down.

With --workloads the cluster also runs the controllers, the scheduler and kwok,
so that the web apps' Deployments become Available and the apps Ready.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			// Before anything logs through controller-runtime, which would
			// otherwise complain that no logger was set.
			printer := &transitionPrinter{out: out}
			ctrl.SetLogger(logr.New(printer))
			opts.Progress = cmd.ErrOrStderr()
			crds, err := os.MkdirTemp("", "kfsm-demo-crds-")
			if err != nil {
				return err
			}
			defer func() { _ = os.RemoveAll(crds) }()
			if err := writeCRDs(crds); err != nil {
				return err
			}
			opts.CRDPaths = []string{crds}
			c, err := cluster.Start(cmd.Context(), opts)
			if err != nil {
				return err
			}
			// The duration counts from when the cluster is up, so that a
			// first run, which builds the binaries, still shows something.
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			fmt.Fprintf(out, "kubeconfig: %s\n", c.Kubeconfig)
			fmt.Fprintf(out, "try: %s --kubeconfig %s get moose -w\n", c.Assets.Kubectl(), c.Kubeconfig)
			fmt.Fprintf(out, "     %s --kubeconfig %s get webapps,deployments,services\n", c.Assets.Kubectl(), c.Kubeconfig)
			serve, err := startDashboard(c.Config, dashboardAddress, out)
			if err != nil {
				return errors.Join(err, c.Stop())
			}
			dashboardCtx, stopDashboard := context.WithCancel(ctx)
			served := make(chan error, 1)
			go func() { served <- serve(dashboardCtx) }()
			runErr := runOperators(ctx, c, printer)
			stopDashboard()
			runErr = errors.Join(runErr, <-served)
			fmt.Fprintln(out, "stopping the cluster")
			if err := c.Stop(); err != nil {
				return errors.Join(runErr, err)
			}
			if runErr != nil {
				return runErr
			}
			fmt.Fprintln(out, "stopped")
			return nil
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 0, "stop this long after the cluster is up (default: run until interrupted)")
	cmd.Flags().BoolVar(&opts.Workloads, "workloads", false, "also run kube-controller-manager, kube-scheduler and kwok, so Deployments really run")
	cmd.Flags().StringVar(&dashboardAddress, "dashboard-address", "127.0.0.1:0", "the address of the dashboard, the demo's live web view; port 0 picks a free one")
	return cmd
}
