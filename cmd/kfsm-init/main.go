// Command kfsm-init is kfsm init on its own: it starts a new operator
// project built on kfsm. From a kfsm checkout:
//
//	go run ./cmd/kfsm-init ../widget --module example.com/widget --kind Widget --group example.com --kfsm-path .
//
// It takes the arguments and flags of kfsm init and runs the same code.
// It imports only the standard library and a few small packages of
// kfsm's own, the scaffold above all, so go run compiles it in seconds, where the whole kfsm command, with its
// dashboard, gRPC and Kubernetes clients, takes many minutes on a small
// machine with a cold build cache.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kfsm/kfsm/cmd/internal/scaffold"
	"github.com/kfsm/kfsm/cmd/internal/terminal"
)

const usage = "kfsm-init [DIR] --module PATH --kind KIND --group GROUP [flags]"

// errFlags is a mistake in the flags, which the flag package has reported
// already, with the usage.
var errFlags = errors.New("bad flags")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, errFlags):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "kfsm-init:", terminal.Text(err.Error()))
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var p scaffold.Project
	flags := flag.NewFlagSet("kfsm-init", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  %s\n\n%s\n\nFlags:\n", usage, scaffold.Help)
		flags.PrintDefaults()
	}
	p.Flags(flags)
	// DIR may come before the flags, as kfsm init takes it, where the flag
	// package stops at the first argument that is not a flag.
	var dirs []string
	for {
		if err := flags.Parse(args); errors.Is(err, flag.ErrHelp) {
			return nil
		} else if err != nil {
			return errFlags
		}
		if flags.NArg() == 0 {
			break
		}
		dirs = append(dirs, flags.Arg(0))
		args = flags.Args()[1:]
	}
	dir := "."
	switch len(dirs) {
	case 0:
	case 1:
		dir = dirs[0]
	default:
		return fmt.Errorf("one directory at most, not %s; usage: %s", strings.Join(dirs, " "), usage)
	}
	return p.Init(ctx, dir, stdout, stderr)
}
