package main

import (
	"flag"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cmd/internal/scaffold"
)

func newInitCommand() *cobra.Command {
	var p scaffold.Project
	cmd := &cobra.Command{
		Use:   "init [DIR] --module PATH --kind KIND --group GROUP",
		Short: "Start a new operator project built on kfsm",
		Long:  scaffold.Help,
		Example: `  kfsm init widget --module example.com/widget --kind Widget --group example.com
  kfsm init widget --module example.com/widget --kind Widget --group example.com --kfsm-path ~/src/kfsm`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			return p.Init(cmd.Context(), dir, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	flags := flag.NewFlagSet("init", flag.ContinueOnError)
	p.Flags(flags)
	cmd.Flags().AddGoFlagSet(flags)
	for _, name := range []string{"module", "kind", "group"} {
		if err := cmd.MarkFlagRequired(name); err != nil {
			panic(err) // a flag declared above
		}
	}
	return cmd
}
