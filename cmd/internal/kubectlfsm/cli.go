// Package kubectlfsm is kubectl fsm: commands that show kfsm machines and
// their objects from a cluster, and turn the knobs kfsm reads (retry,
// pause). The kfsm command carries them, and works as the kubectl plugin
// when its file is named kubectl-fsm.
package kubectlfsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/internal/buildinfo"
)

// PluginName is the file name under which kubectl finds the plugin.
const PluginName = "kubectl-fsm"

// Options are the flags that every command takes, as kubectl's.
type Options struct {
	// ConfigFlags are kubectl's global flags: --kubeconfig, --context,
	// -n, --as, --token, --server, --request-timeout and the others. Nil
	// for a new set, which AddFlags makes.
	ConfigFlags   *genericclioptions.ConfigFlags
	AllNamespaces bool
	// Now is the time that durations count to; tests fix it.
	Now func() time.Time

	namespace string // the namespace to use: the flag's, or the context's
}

// Commands returns kubectl fsm's commands, sharing opts.
func Commands(opts *Options) []*cobra.Command {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return []*cobra.Command{
		newGraphCommand(opts), newGetCommand(opts), newDescribeCommand(opts), newWhyCommand(opts),
		newAnnotateCommand(opts, "retry"), newAnnotateCommand(opts, "pause"), newAnnotateCommand(opts, "resume"),
		newWatchCommand(opts),
	}
}

// NewPluginCommand is kubectl fsm as a command of its own, with opts
// (nil for the defaults).
func NewPluginCommand(opts *Options) *cobra.Command {
	root := &cobra.Command{
		Use:           "fsm",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fsm"},
		Short:         "See kfsm machines and their objects, and retry or pause objects",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if opts == nil {
		opts = &Options{}
	}
	AddFlags(root, opts)
	root.AddCommand(Commands(opts)...)
	root.AddCommand(newVersionCommand())
	return root
}

// newVersionCommand is kubectl fsm version. The kfsm command has a
// version of its own, so it is not among Commands.
func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the versions of kubectl fsm and Go",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "kubectl fsm %s, built with %s\n", buildinfo.Version(), runtime.Version())
		},
	}
}

// AddFlags adds kubectl's global flags, and -A, to cmd and its
// subcommands.
func AddFlags(cmd *cobra.Command, opts *Options) {
	if opts.ConfigFlags == nil {
		opts.ConfigFlags = genericclioptions.NewConfigFlags(true)
	}
	opts.ConfigFlags.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().BoolVarP(&opts.AllNamespaces, "all-namespaces", "A", false, "objects of all namespaces")
}

// cluster connects to the cluster the flags name.
func (o *Options) cluster() (inspect.Cluster, error) {
	if o.ConfigFlags == nil {
		return inspect.Cluster{}, errors.New("kubectl's flags were not added to the command")
	}
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return inspect.Cluster{}, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if o.namespace, _, err = o.ConfigFlags.ToRawKubeConfigLoader().Namespace(); err != nil {
		return inspect.Cluster{}, fmt.Errorf("reading the namespace: %w", err)
	}
	mapper, err := o.ConfigFlags.ToRESTMapper()
	if err != nil {
		return inspect.Cluster{}, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return inspect.Cluster{}, err
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return inspect.Cluster{}, err
	}
	return inspect.Cluster{Dynamic: dyn, Metadata: md, Mapper: mapper}, nil
}

// listNamespace is the namespace to list in: "" with -A.
func (o *Options) listNamespace() string {
	if o.AllNamespaces {
		return ""
	}
	return o.namespace
}

// target reads RESOURCE/NAME, or RESOURCE NAME.
func target(args []string) (resource, name string, err error) {
	switch len(args) {
	case 1:
		resource, name, _ = strings.Cut(args[0], "/")
	case 2:
		resource, name = args[0], args[1]
	}
	if resource == "" || name == "" {
		return "", "", errors.New("name an object as RESOURCE/NAME, for example moose/moose-01")
	}
	return resource, name, nil
}

// machine connects and resolves RESOURCE to the machine that drives it.
func (o *Options) machine(ctx context.Context, resource string) (inspect.Cluster, *inspect.Machine, error) {
	c, err := o.cluster()
	if err != nil {
		return c, nil, err
	}
	m, err := c.Resolve(ctx, resource)
	return c, m, err
}

// object resolves RESOURCE/NAME to the machine and the object.
func (o *Options) object(ctx context.Context, args []string) (inspect.Cluster, *inspect.Machine, inspect.Object, error) {
	resource, name, err := target(args)
	if err != nil {
		return inspect.Cluster{}, nil, inspect.Object{}, err
	}
	c, m, err := o.machine(ctx, resource)
	if err != nil {
		return c, nil, inspect.Object{}, err
	}
	obj, err := c.Object(ctx, m, o.namespace, name)
	return c, m, obj, err
}

// table writes rows with columns aligned, two spaces apart. Cells hold
// what the cluster says: each is made one line, its control characters
// escaped, in place.
func table(w io.Writer, rows [][]string) {
	widths := map[int]int{}
	for _, r := range rows {
		for i := range r {
			r[i] = terminal.Line(r[i])
			widths[i] = max(widths[i], len([]rune(r[i])))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		for i, cell := range r {
			if i == len(r)-1 {
				b.WriteString(cell)
				break
			}
			b.WriteString(cell)
			b.WriteString(strings.Repeat(" ", widths[i]-len([]rune(cell))+2))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// printf is fmt.Fprintf for a line that names what the cluster holds:
// each argument of a string type (string, fsm.State, graph.State) is
// printed on one line, its control characters escaped. The format is
// kubectl fsm's own.
func printf(w io.Writer, format string, args ...any) {
	for i, a := range args {
		if v := reflect.ValueOf(a); v.Kind() == reflect.String {
			args[i] = terminal.Line(v.String())
		}
	}
	fmt.Fprintf(w, format, args...)
}
