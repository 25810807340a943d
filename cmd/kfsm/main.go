// Command kfsm is the kfsm command-line tool: it runs the demo, manages
// the embedded Kubernetes that kfsm's tests and demo use, and reports the
// edge coverage that fsmtest records.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kfsm:", err)
		cancel()
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kfsm",
		Short:         "Tools for kfsm, the framework for Kubernetes operators as finite state machines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newAssetsCommand(), newCoverCommand(), newDemoCommand())
	return root
}
