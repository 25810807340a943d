package kubectlfsm

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

// details is what describe and why show about an object beyond its own
// status: its children and its recent events.
type details struct {
	children []child
	events   []eventsv1.Event
}

type child struct {
	ref    fsm.OutputRef
	status string // kstatus's word: Current, InProgress, Failed, NotFound...
	reason string
}

func newDescribeCommand(opts *Options) *cobra.Command {
	return newObjectCommand(opts, "describe", "Show an object's state, conditions, history, actions, children and events, then its machine's graph", writeDescribe, nil)
}

func newWhyCommand(opts *Options) *cobra.Command {
	cmd := newObjectCommand(opts, "why", "Say what keeps an object from being Ready", writeWhy, whyExit)
	cmd.Long = fmt.Sprintf(`Why says only what keeps the object from being Ready: the failing state's
reason and message, the next attempt, the actions still running, the
children that are not ready, and where a timeout will take it and when.

Its exit status says the same to a script:
  0  the object is Ready, or on its way there
  1  an error: no such object, a bad flag, no cluster
  %d  the object is Stalled: kfsm waits for a new spec or kubectl fsm retry
  %d  its handler is failing, and kfsm retries it
  %d  it is paused by the annotation %s`, ExitStalled, ExitFailing, ExitPaused, fsm.AnnotationPaused)
	return cmd
}

// newObjectCommand is a command that reads one object with its children
// and events and writes them; exit, if not nil, is the error that the
// command returns after writing, for its exit status.
func newObjectCommand(opts *Options, verb, short string, write func(io.Writer, *inspect.Machine, inspect.Object, details, time.Time), exit func(inspect.Object) error) *cobra.Command {
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
			d, err := look(cmd.Context(), c, obj)
			if err != nil {
				return err
			}
			write(cmd.OutOrStdout(), m, obj, d, opts.Now())
			if exit == nil {
				return nil
			}
			return exit(obj)
		},
	}
}

// look reads the object's children and events.
func look(ctx context.Context, c inspect.Cluster, o inspect.Object) (details, error) {
	var d details
	for _, ref := range o.Status.Outputs {
		ch := child{ref: ref}
		mapping, err := c.Mapper.RESTMapping(schema.GroupKind{Group: ref.Group, Kind: ref.Kind})
		if err != nil {
			ch.status, ch.reason = "Unknown", err.Error()
			d.children = append(d.children, ch)
			continue
		}
		u, err := c.Dynamic.Resource(mapping.Resource).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			ch.status = status.NotFoundStatus.String()
		case err != nil:
			ch.status, ch.reason = "Unknown", err.Error()
		default:
			res, err := status.Compute(u)
			if err != nil {
				ch.status, ch.reason = "Unknown", err.Error()
			} else {
				ch.status, ch.reason = res.Status.String(), res.Message
			}
		}
		d.children = append(d.children, ch)
	}
	list, err := c.Dynamic.Resource(eventsv1.SchemeGroupVersion.WithResource("events")).Namespace(o.Namespace).
		List(ctx, metav1.ListOptions{FieldSelector: "regarding.uid=" + o.UID})
	if apierrors.IsForbidden(err) {
		return d, nil // events are a courtesy: who may not read them sees the rest
	}
	if err != nil {
		return d, fmt.Errorf("listing the events of %s: %w", o.Name, err)
	}
	for _, item := range list.Items {
		var ev eventsv1.Event
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &ev); err != nil {
			return d, err
		}
		d.events = append(d.events, ev)
	}
	sort.SliceStable(d.events, func(i, j int) bool { return eventTime(d.events[i]).Before(eventTime(d.events[j])) })
	if len(d.events) > 10 {
		d.events = d.events[len(d.events)-10:]
	}
	return d, nil
}

func eventTime(ev eventsv1.Event) time.Time {
	if ev.Series != nil {
		return ev.Series.LastObservedTime.Time
	}
	if !ev.EventTime.IsZero() {
		return ev.EventTime.Time
	}
	return ev.DeprecatedLastTimestamp.Time
}

// writeDescribe writes the object's own data first, the most read
// first, and the graph that it moves on last, with its state marked.
func writeDescribe(w io.Writer, m *inspect.Machine, o inspect.Object, d details, now time.Time) {
	st, reason := summary(o)
	rows := [][]string{
		{"Name:", o.Name},
		{"Namespace:", o.Namespace},
		{"Machine:", fmt.Sprintf("%s (%s, %s mode)", m.Machine, kindOf(m), m.Graph.Mode)},
		{"State:", fmt.Sprintf("%s for %s", orNone(string(o.Status.State)), since(o.Status.StateSince, now))},
		{"Status:", strings.TrimSpace(st + " " + parens(reason))},
	}
	if o.Status.Failures > 0 {
		rows = append(rows, []string{"Failures:", fmt.Sprintf("%d in a row%s", o.Status.Failures, retryAt(o, now))})
	}
	if note := m.VersionNote(o.Status.GraphVersion); note != "" {
		rows = append(rows, []string{"Graph:", note})
	}
	if o.Namespace == "" {
		rows = append(rows[:1], rows[2:]...)
	}
	table(w, rows)

	fmt.Fprintln(w, "\nConditions:")
	conds := [][]string{{"  TYPE", "STATUS", "REASON", "FOR", "MESSAGE"}}
	for _, c := range o.Status.Conditions {
		conds = append(conds, []string{"  " + c.Type, string(c.Status), c.Reason, shortDuration(now.Sub(c.LastTransitionTime.Time)), c.Message})
	}
	table(w, conds)

	section(w, "History", historyRows(o, now))
	section(w, "Actions", actionRows(o, now))
	section(w, "Children", childRows(d))
	evs := [][]string{}
	for _, ev := range d.events {
		evs = append(evs, []string{"  " + shortDuration(now.Sub(eventTime(ev))) + " ago", ev.Type, ev.Reason, ev.Note})
	}
	section(w, "Events", evs)

	// An object not yet migrated is drawn on its own version's graph.
	g, _ := m.GraphOf(o.Status.GraphVersion)
	fmt.Fprintln(w, "\nGraph:")
	fmt.Fprint(w, indent(art(g, drawing{current: graph.State(o.Status.State)}), "  "))
}

// section writes a titled table, or "(none)" under the title.
func section(w io.Writer, title string, rows [][]string) {
	fmt.Fprintf(w, "\n%s:\n", title)
	if len(rows) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	table(w, rows)
}

// historyRows are the object's transitions, each with the time it then
// spent in the state it entered.
func historyRows(o inspect.Object, now time.Time) [][]string {
	rows := [][]string{}
	for i, t := range o.Status.History {
		end := now
		if i+1 < len(o.Status.History) {
			end = o.Status.History[i+1].Time.Time
		}
		stay := shortDuration(end.Sub(t.Time.Time))
		if i+1 == len(o.Status.History) {
			stay += " so far"
		}
		from := string(t.From)
		if from == "" {
			from = "(new)"
		}
		rows = append(rows, []string{"  " + t.Time.UTC().Format("2006-01-02 15:04:05"), from + " → " + string(t.To), t.Reason, "then " + stay + " in " + string(t.To)})
	}
	return rows
}

// childRows are the object's children as a tree, with their readiness.
func childRows(d details) [][]string {
	rows := [][]string{}
	for i, ch := range d.children {
		branch := "├─"
		if i == len(d.children)-1 {
			branch = "└─"
		}
		rows = append(rows, []string{"  " + branch + " " + ch.ref.Kind + "/" + ch.ref.Name, ch.status, ch.reason})
	}
	return rows
}

// writeWhy says only what keeps the object from Ready.
func writeWhy(w io.Writer, m *inspect.Machine, o inspect.Object, d details, now time.Time) {
	name := m.GVR.Resource + "/" + o.Name
	ready := o.Condition(fsm.ConditionReady)
	switch {
	case o.Deleting:
		printf(w, "%s is being deleted; it is in state %s of the deletion path.\n", name, orNone(string(o.Status.State)))
	case o.Paused:
		printf(w, "%s is paused: annotation %s is \"true\", so no handler runs. Resume it with: kubectl fsm resume %s\n", name, fsm.AnnotationPaused, name)
		return
	case o.Status.ObservedGeneration < o.Generation:
		printf(w, "%s has a new spec (generation %d) that kfsm has not yet seen (it last saw %d): is the operator running?\n", name, o.Generation, o.Status.ObservedGeneration)
		return
	case isTrue(o, fsm.ConditionStalled):
		c := o.Condition(fsm.ConditionStalled)
		printf(w, "%s is Stalled in state %s: %s: %s\n", name, o.Status.State, c.Reason, c.Message)
		if !whyIndeterminate(w, name, o, now) {
			printf(w, "kfsm will not try again until the spec changes or you ask: kubectl fsm retry %s\n", name)
		}
		return
	case ready != nil && ready.Status == metav1.ConditionTrue:
		printf(w, "%s is Ready, in state %s (%s).\n", name, o.Status.State, ready.Reason)
		return
	default:
		printf(w, "%s is not Ready: it has been in state %s for %s.\n", name, orNone(string(o.Status.State)), since(o.Status.StateSince, now))
	}
	if ready != nil && ready.Message != "" {
		printf(w, "  %s: %s\n", ready.Reason, ready.Message)
	}
	if o.Status.Failures > 0 {
		printf(w, "  the handler failed %d times in a row%s\n", o.Status.Failures, retryAt(o, now))
	}
	for _, rec := range running(o) {
		printf(w, "  action %s is running (key %s): %s\n", rec.Name, rec.Key, life(rec, now))
	}
	for _, ch := range d.children {
		if ch.status != status.CurrentStatus.String() {
			printf(w, "  child %s/%s is %s%s\n", ch.ref.Kind, ch.ref.Name, ch.status, prefixed(": ", ch.reason))
		}
	}
	g, _ := m.GraphOf(o.Status.GraphVersion)
	if spec, ok := g.Lookup(graph.State(o.Status.State)); ok && spec.Timeout != nil && o.Status.StateSince != nil {
		at := o.Status.StateSince.Add(spec.Timeout.After)
		if at.After(now) {
			printf(w, "  if it is still in %s in %s, its timeout takes it to %s\n", o.Status.State, shortDuration(at.Sub(now)), spec.Timeout.To)
		} else {
			printf(w, "  its timeout to %s was due %s ago: is the operator running?\n", spec.Timeout.To, shortDuration(now.Sub(at)))
		}
	}
}

// whyIndeterminate says, of an object that an action's lost run stalled,
// where the action was and what a person does about it; it reports
// whether the status holds that action.
func whyIndeterminate(w io.Writer, name string, o inspect.Object, now time.Time) bool {
	i := slices.IndexFunc(o.Status.Actions, o.Indeterminate)
	if i < 0 {
		return false
	}
	rec := o.Status.Actions[i]
	printf(w, "  action %s (key %s): %s\n", rec.Name, rec.Key, life(rec, now))
	printf(w, "kfsm will not run %s again by itself: whether it took effect is unknown.\n", rec.Name)
	printf(w, "Check the system it acts on for key %s; if it did not take effect there, run it again, under a new key, with: kubectl fsm retry %s\n", rec.Key, name)
	return true
}

func retryAt(o inspect.Object, now time.Time) string {
	if o.Status.RetryAt == nil {
		return ""
	}
	if d := o.Status.RetryAt.Sub(now); d > 0 {
		return fmt.Sprintf("; next attempt in %s", shortDuration(d))
	}
	return "; next attempt due now"
}

func orNone(s string) string {
	if s == "" {
		return "(none yet)"
	}
	return s
}

func parens(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func indent(s, by string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = by + l
		}
	}
	return strings.Join(lines, "")
}
