package kubectlfsm

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

func newGraphCommand(opts *Options) *cobra.Command {
	var output string
	var counts bool
	cmd := &cobra.Command{
		Use:   "graph RESOURCE",
		Short: "Show the graph of the machine that drives RESOURCE",
		Long: `Graph reads the graph that the machine driving RESOURCE published on the
resource's CustomResourceDefinition and draws it: as boxes and arrows (-o text,
the default), Mermaid, DOT or JSON. With --counts it shows how many objects are
in each state (in the namespace, or all with -A).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeResource(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, m, err := opts.machine(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			d := drawing{}
			if counts {
				objs, err := c.Objects(cmd.Context(), m, opts.listNamespace())
				if err != nil {
					return err
				}
				d.counts = map[graph.State]int{}
				for _, o := range objs {
					d.counts[graph.State(o.Status.State)]++
				}
			}
			out := cmd.OutOrStdout()
			switch output {
			case "text", "":
				printf(out, "machine %s (%s, %s mode)\n", m.Machine, kindOf(m), m.Graph.Mode)
				fmt.Fprint(out, art(m.Graph, d))
			case "mermaid":
				fmt.Fprint(out, terminal.Text(m.Graph.Mermaid()))
			case "dot":
				fmt.Fprint(out, terminal.Text(m.Graph.DOT()))
			case "json":
				data, err := m.Graph.JSON()
				if err != nil {
					return err
				}
				_, err = out.Write(terminal.JSON(data))
				return err
			default:
				return fmt.Errorf("-o %s: the formats are text, mermaid, dot and json", output)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, mermaid, dot or json")
	cmd.Flags().BoolVar(&counts, "counts", false, "show the number of objects in each state")
	return cmd
}

func kindOf(m *inspect.Machine) string {
	return fmt.Sprintf("%s/%s %s", m.Resource.Group, m.Resource.Version, m.Resource.Kind)
}

func newGetCommand(opts *Options) *cobra.Command {
	var output *getOutput
	cmd := &cobra.Command{
		Use:   "get RESOURCE",
		Short: "List a machine's objects with their state, time in state and readiness",
		Long: `Get lists the objects of the machine that drives RESOURCE: each one's state,
the time it has been in it, its readiness and the reason, then a count per
state. For a sharded machine, a REPLICA column names the replica that holds
each object.

Output formats (-o):
  (none)           the table
  wide             the table with FAILURES (the handler's failures in a row),
                   ACTIONS (the actions running) and GRAPH (the version of
                   the machine's graph that the object is recorded at)
  name             kind.group/name, as kubectl get -o name prints it
  json, yaml       the objects as a v1 List, as kubectl get prints them
  jsonpath=…       a JSONPath template over that List, as kubectl's
  go-template=…    a Go template over that List, as kubectl's
  custom-columns=HEADER:JSONPATH,…
                   a column for each JSONPath, read from each object`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeResource(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			table, wide := output.table()
			var p printers.ResourcePrinter
			if !table {
				var err error
				if p, err = output.printer(); err != nil {
					return err
				}
			}
			c, m, err := opts.machine(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			objs, err := c.Objects(cmd.Context(), m, opts.listNamespace())
			if err != nil {
				return err
			}
			if !table {
				return output.print(cmd.OutOrStdout(), p, objs)
			}
			// A sharded machine's objects show the replica that holds
			// them, if the Leases can be read.
			holder, sharded := c.ShardHolders(cmd.Context(), m)
			if !sharded {
				holder = nil
			}
			writeGet(cmd.OutOrStdout(), m, objs, getColumns{namespace: opts.AllNamespaces, wide: wide, holder: holder}, opts.Now())
			return nil
		},
	}
	output = addGetOutput(cmd)
	return cmd
}

// getColumns are the columns of get's table beyond the usual ones.
type getColumns struct {
	namespace bool                   // with -A
	wide      bool                   // with -o wide
	holder    func(types.UID) string // for a sharded machine
}

func writeGet(w io.Writer, m *inspect.Machine, objs []inspect.Object, cols getColumns, now time.Time) {
	if len(objs) == 0 {
		printf(w, "no %s\n", m.GVR.Resource)
		return
	}
	header := []string{"NAME", "STATE", "FOR", "STATUS", "REASON"}
	if cols.namespace {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if cols.wide {
		header = append(header, "FAILURES", "ACTIONS", "GRAPH")
	}
	if cols.holder != nil {
		header = append(header, "REPLICA")
	}
	rows := [][]string{header}
	perState := map[fsm.State]int{}
	for _, o := range objs {
		status, reason := summary(o)
		row := []string{o.Name, string(o.Status.State), since(o.Status.StateSince, now), status, reason}
		if cols.namespace {
			row = append([]string{o.Namespace}, row...)
		}
		if cols.wide {
			var names []string
			for _, rec := range running(o) {
				names = append(names, rec.Name)
			}
			row = append(row, fmt.Sprint(o.Status.Failures), cmp.Or(strings.Join(names, ","), "-"), fmt.Sprintf("v%d", max(o.Status.GraphVersion, 1)))
		}
		if cols.holder != nil {
			row = append(row, cmp.Or(cols.holder(types.UID(o.UID)), "(moving)"))
		}
		rows = append(rows, row)
		perState[o.Status.State]++
	}
	table(w, rows)
	var parts []string
	for _, s := range m.Graph.States {
		if n := perState[fsm.State(s.Name)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s.Name, n))
			delete(perState, fsm.State(s.Name))
		}
	}
	if n := perState[""]; n > 0 {
		parts = append(parts, fmt.Sprintf("(no state yet) %d", n))
		delete(perState, "")
	}
	var unknown []string
	for s := range perState {
		unknown = append(unknown, fmt.Sprintf("%s %d (not in the graph)", s, perState[s]))
	}
	slices.Sort(unknown)
	printf(w, "%s: %s\n", plural(len(objs), "object"), strings.Join(append(parts, unknown...), ", "))
}

// summary is an object's readiness in a word, and the reason for it.
func summary(o inspect.Object) (status, reason string) {
	reasonOf := func(t string) string {
		if c := o.Condition(t); c != nil {
			return c.Reason
		}
		return ""
	}
	switch {
	case o.Deleting:
		return "Deleting", reasonOf(fsm.ConditionReady)
	case o.Paused:
		return "Paused", ""
	case isTrue(o, fsm.ConditionStalled):
		return "Stalled", reasonOf(fsm.ConditionStalled)
	case o.Status.ObservedGeneration < o.Generation:
		return "Reconciling", "NewSpec"
	case isTrue(o, fsm.ConditionReady):
		return "Ready", reasonOf(fsm.ConditionReady)
	case isTrue(o, fsm.ConditionReconciling):
		return "Reconciling", reasonOf(fsm.ConditionReconciling)
	}
	return "Unknown", reasonOf(fsm.ConditionReady)
}

func isTrue(o inspect.Object, t string) bool {
	c := o.Condition(t)
	return c != nil && c.Status == metav1.ConditionTrue
}

func since(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return shortDuration(now.Sub(t.Time))
}

func newAnnotateCommand(opts *Options, verb string) *cobra.Command {
	short := map[string]string{
		"retry":  "Run the current state's handler of an object again now, even if it is Stalled",
		"pause":  "Stop kfsm from running any handler for an object until it is resumed",
		"resume": "Let kfsm run a paused object's handlers again",
	}[verb]
	return &cobra.Command{
		Use:               verb + " RESOURCE/NAME",
		Short:             short,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeObject(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, m, obj, err := opts.object(cmd.Context(), args)
			if err != nil {
				return err
			}
			var value any
			switch verb {
			case "retry":
				value = map[string]any{fsm.AnnotationRetry: opts.Now().UTC().Format(time.RFC3339Nano)}
			case "pause":
				value = map[string]any{fsm.AnnotationPaused: "true"}
			case "resume":
				value = map[string]any{fsm.AnnotationPaused: nil}
			}
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": value}})
			if err != nil {
				return err
			}
			ri := c.Dynamic.Resource(m.GVR)
			if m.Namespaced {
				_, err = ri.Namespace(obj.Namespace).Patch(cmd.Context(), obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			} else {
				_, err = ri.Patch(cmd.Context(), obj.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			}
			if err != nil {
				return err
			}
			done := map[string]string{"retry": "asked to retry", "pause": "paused", "resume": "resumed"}[verb]
			printf(cmd.OutOrStdout(), "%s/%s %s (in state %s)\n", m.GVR.Resource, obj.Name, done, obj.Status.State)
			return nil
		},
	}
}

func newWatchCommand(opts *Options) *cobra.Command {
	return &cobra.Command{
		Use:               "watch RESOURCE",
		Short:             "Print each transition of a machine's objects as it happens, one line each",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeResource(opts),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, m, err := opts.machine(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return watchTransitions(cmd.Context(), c, m, opts.listNamespace(), cmd.OutOrStdout())
		},
	}
}

// watchTransitions prints the transitions that objects record from now
// on, until ctx ends. A watch that the server closes is started again from
// the last version seen, which the server's bookmarks keep recent; one
// whose version the server no longer holds lists again and prints what
// the objects gained meanwhile, and which went.
func watchTransitions(ctx context.Context, c inspect.Cluster, m *inspect.Machine, namespace string, w io.Writer) error {
	if !m.Namespaced {
		namespace = ""
	}
	ri := c.Dynamic.Resource(m.GVR).Namespace(namespace)
	var seen map[types.UID]known // nil until the first list, whose transitions are no news
	version := ""
	list := func() error {
		l, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		listed := make(map[types.UID]known, len(l.Items))
		for i := range l.Items {
			o, err := inspect.FromUnstructured(&l.Items[i])
			if err != nil {
				return err
			}
			if seen != nil {
				printGained(w, o, seen[types.UID(o.UID)].history)
			}
			listed[types.UID(o.UID)] = known{objectName(o), o.Status.History}
		}
		for uid, k := range seen {
			if _, ok := listed[uid]; !ok {
				printf(w, "%s  %s  deleted\n", time.Now().Format("15:04:05"), k.name)
			}
		}
		seen, version = listed, l.GetResourceVersion()
		return nil
	}
	// unlessDone is err, or nil once ctx has ended: the watch was stopped,
	// not broken.
	unlessDone := func(err error) error {
		select {
		case <-ctx.Done():
			return nil
		default:
			return err
		}
	}
	if err := list(); err != nil {
		return err
	}
	for {
		wi, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: version, AllowWatchBookmarks: true})
		if err == nil {
			err = watchEvents(wi, seen, &version, w)
		}
		switch {
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			err = list()
		case err != nil:
			err = fmt.Errorf("watching %s: %w", m.GVR.GroupResource(), err)
		}
		if err != nil || ctx.Err() != nil {
			return unlessDone(err)
		}
		// The server ended the watch, or its version expired: watch again.
	}
}

// known is what a watch knows of an object: its name, as printed, and its
// history.
type known struct {
	name    string
	history []fsm.Transition
}

// watchEvents prints what the events of wi bring until it ends, and keeps
// seen and version up to date; the error is of an event that ended it.
func watchEvents(wi watch.Interface, seen map[types.UID]known, version *string, w io.Writer) error {
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		switch ev.Type {
		case watch.Error:
			return apierrors.FromObject(ev.Object)
		case watch.Bookmark:
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				*version = u.GetResourceVersion()
			}
			continue
		}
		o, ok := asObject(ev.Object)
		if !ok {
			continue
		}
		*version = o.Unstructured.GetResourceVersion()
		printGained(w, o, seen[types.UID(o.UID)].history)
		seen[types.UID(o.UID)] = known{objectName(o), o.Status.History}
		if ev.Type == watch.Deleted {
			printf(w, "%s  %s  deleted\n", time.Now().Format("15:04:05"), objectName(o))
			delete(seen, types.UID(o.UID))
		}
	}
	return nil
}

// printGained prints the transitions of o that were not in the history
// known before, one line each.
func printGained(w io.Writer, o inspect.Object, before []fsm.Transition) {
	for _, t := range appended(before, o.Status.History) {
		from := string(t.From)
		if from == "" {
			from = "(new)"
		}
		printf(w, "%s  %s  %s → %s  %s\n", t.Time.Local().Format("15:04:05"), objectName(o), from, t.To, t.Reason)
	}
}

// asObject reads a watch event's object.
func asObject(obj runtime.Object) (inspect.Object, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return inspect.Object{}, false
	}
	o, err := inspect.FromUnstructured(u)
	return o, err == nil
}

// appended returns the transitions of history that are not in before, an
// earlier copy of it: kfsm appends to a history and drops its oldest
// entries once it is full, so what survives of before starts history. The
// times are of seconds, so a transition is told apart by the whole of it
// and its place, not by its time alone.
func appended(before, history []fsm.Transition) []fsm.Transition {
	for dropped := range before {
		rest := before[dropped:]
		if len(rest) <= len(history) && slices.EqualFunc(rest, history[:len(rest)], sameTransition) {
			return history[len(rest):]
		}
	}
	return history // nothing known survives
}

func sameTransition(a, b fsm.Transition) bool {
	return a.From == b.From && a.To == b.To && a.Reason == b.Reason && a.Time.Equal(&b.Time) && a.TraceParent == b.TraceParent
}

func objectName(o inspect.Object) string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}
