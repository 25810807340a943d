// Command kubectl-fsm is kubectl fsm, the kubectl plugin that shows kfsm
// machines and their objects: install it on PATH and run kubectl fsm.
// The kfsm command does the same when its file is named kubectl-fsm.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kfsm/kfsm/cmd/internal/kubectlfsm"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := kubectlfsm.NewPluginCommand(nil).ExecuteContext(ctx); err != nil {
		cancel()
		// why reports a Stalled or failing object by its exit status too.
		kubectlfsm.Exit("kubectl fsm", err)
	}
}
