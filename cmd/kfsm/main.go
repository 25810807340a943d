// Command kfsm is the kfsm command-line tool: it runs the demo and the
// dashboard, manages the embedded Kubernetes that kfsm's tests and demo
// use, reports the edge coverage that fsmtest records, and carries
// kubectl fsm's commands (it is that plugin when named kubectl-fsm).
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cmd/internal/kubectlfsm"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	root, name := newRootCommand(), "kfsm"
	if strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe") == kubectlfsm.PluginName {
		// Named as kubectl's plugin: kubectl fsm runs it.
		root, name = kubectlfsm.NewPluginCommand(nil), "kubectl fsm"
	}
	if err := root.ExecuteContext(ctx); err != nil {
		cancel()
		// kubectl fsm why reports a Stalled or failing object by its exit
		// status too; any other error exits 1.
		kubectlfsm.Exit(name, err)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kfsm",
		Short:         "Tools for kfsm, the framework for Kubernetes operators as finite state machines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newAssetsCommand(), newCheckCommand(), newCoverCommand(), newCreateCommand(), newDashboardCommand(), newDemoCommand(), newInitCommand(), newVersionCommand())
	root.AddCommand(newVetCommand())
	// kubectl fsm's commands, with kubectl's connection flags.
	opts := &kubectlfsm.Options{}
	for _, cmd := range kubectlfsm.Commands(opts) {
		kubectlfsm.AddFlags(cmd, opts)
		root.AddCommand(cmd)
	}
	return root
}
