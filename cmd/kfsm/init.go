package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cmd/internal/scaffold"
	"github.com/kfsm/kfsm/fsm"
)

func newInitCommand() *cobra.Command {
	var p scaffold.Project
	cmd := &cobra.Command{
		Use:   "init [DIR] --module PATH --kind KIND --group GROUP",
		Short: "Start a new operator project built on kfsm",
		Long: `Init writes a new operator project into DIR (by default the current
directory), which must be new or empty: an API type whose status embeds
kfsm's, a machine with two states and a deletion path, its tests, main.go
with a controller-runtime manager, a Makefile (test, run, generate, verify)
and the manifests to deploy it. Its README says what is where.

It then runs go mod tidy and controller-gen in the project, for its go.sum,
its CRD and its RBAC role, which reach the Go module proxy, and the
project's hack/webhooks, for its webhook configurations. The project
requires the kfsm release that this command was built with (go install
github.com/kfsm/kfsm/cmd/kfsm@v0.1.0 builds it with v0.1.0), or the one
that --kfsm-version names; with --kfsm-path it uses a kfsm checkout
instead, through a replace directive.`,
		Example: `  kfsm init widget --module example.com/widget --kind Widget --group example.com
  kfsm init widget --module example.com/widget --kind Widget --group example.com --kfsm-version v0.1.0
  kfsm init widget --module example.com/widget --kind Widget --group example.com --kfsm-path ~/src/kfsm`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if p.KFSMVersion == "" {
				p.KFSMVersion = fsm.Version()
			}
			if err := p.Write(dir); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote the %s operator in %s; now go mod tidy, controller-gen and hack/webhooks\n", p.Kind, dir)
			if err := p.Complete(cmd.Context(), dir, cmd.ErrOrStderr()); err != nil {
				return err
			}
			fmt.Fprintf(out, "done: cd %s, then make test, and make run\n", dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Module, "module", "", "the Go module path of the project, such as example.com/widget")
	f.StringVar(&p.Kind, "kind", "", "the kind of the resource the operator drives, such as Widget")
	f.StringVar(&p.Group, "group", "", "the kind's API group, a domain such as example.com")
	f.StringVar(&p.Version, "version", "v1alpha1", "the kind's API version")
	f.StringVar(&p.KFSMVersion, "kfsm-version", "", "the kfsm release for the project to require, by default the one this command was built with")
	f.StringVar(&p.KFSMPath, "kfsm-path", "", "a kfsm checkout for the project to use instead of a release")
	cmd.MarkFlagsMutuallyExclusive("kfsm-version", "kfsm-path")
	for _, name := range []string{"module", "kind", "group"} {
		if err := cmd.MarkFlagRequired(name); err != nil {
			panic(err) // a flag declared above
		}
	}
	return cmd
}
