package main

import (
	"flag"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cmd/internal/scaffold"
)

func newCreateCommand() *cobra.Command {
	create := &cobra.Command{
		Use:   "create",
		Short: "Add to an operator project that kfsm init wrote",
	}
	var a scaffold.API
	api := &cobra.Command{
		Use:     "api --kind KIND [--version VERSION]",
		Short:   "Add a kind, with its machine, to the operator project in the current directory",
		Long:    scaffold.APIHelp,
		Example: "  kfsm create api --kind Gadget\n  kfsm create api --kind Gadget --version v1beta1",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.Create(cmd.Context(), ".", cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	flags := flag.NewFlagSet("api", flag.ContinueOnError)
	a.Flags(flags)
	api.Flags().AddGoFlagSet(flags)
	if err := api.MarkFlagRequired("kind"); err != nil {
		panic(err) // a flag declared above
	}
	create.AddCommand(api)
	return create
}
