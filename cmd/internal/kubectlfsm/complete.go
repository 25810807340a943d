package kubectlfsm

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cmd/internal/terminal"
)

// The shell completes RESOURCE with the resources that kfsm machines
// drive, and NAME with the objects of that resource, both read from the
// cluster that the flags on the command line name. A cluster that cannot
// be read completes nothing.

// completeResource completes a command's one RESOURCE argument.
func completeResource(opts *Options) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return opts.resources(contextOf(cmd), toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeObject completes RESOURCE/NAME, or RESOURCE then NAME.
func completeObject(opts *Options) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		ctx := contextOf(cmd)
		switch {
		case len(args) == 0 && strings.Contains(toComplete, "/"):
			resource, _, _ := strings.Cut(toComplete, "/")
			return opts.names(ctx, resource, resource+"/", toComplete), cobra.ShellCompDirectiveNoFileComp
		case len(args) == 0:
			return opts.resources(ctx, toComplete), cobra.ShellCompDirectiveNoFileComp
		case len(args) == 1 && !strings.Contains(args[0], "/"):
			return opts.names(ctx, args[0], "", toComplete), cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}

func contextOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// resources are the resources that machines drive and that start with
// prefix; a resource that several machines drive is offered as
// resource:machine, once for each.
func (o *Options) resources(ctx context.Context, prefix string) []string {
	c, err := o.cluster()
	if err != nil {
		cobra.CompDebugln("kubectl fsm: "+err.Error(), false)
		return nil
	}
	machines, err := c.Machines(ctx)
	if err != nil {
		cobra.CompDebugln("kubectl fsm: "+err.Error(), false)
		return nil
	}
	drivers := map[string]int{}
	for _, m := range machines {
		drivers[m.GVR.Resource]++
	}
	var out []string
	for _, m := range machines {
		name := m.GVR.Resource
		if drivers[name] > 1 {
			name += ":" + m.Machine
		}
		// A name that the shell could not take as it is, is left out.
		if strings.HasPrefix(name, prefix) && terminal.Line(name) == name && !strings.ContainsAny(name, " \t") {
			out = append(out, name)
		}
	}
	return out
}

// names are the objects of resource, each written after before, that
// start with prefix.
func (o *Options) names(ctx context.Context, resource, before, prefix string) []string {
	c, m, err := o.machine(ctx, resource)
	if err != nil {
		cobra.CompDebugln("kubectl fsm: "+err.Error(), false)
		return nil
	}
	objs, err := c.Objects(ctx, m, o.namespace)
	if err != nil {
		cobra.CompDebugln("kubectl fsm: "+err.Error(), false)
		return nil
	}
	var out []string
	for _, obj := range objs {
		if name := before + obj.Name; strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out
}
