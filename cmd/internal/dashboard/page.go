package dashboard

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/graph"
)

//go:embed web
var web embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{"live": liveKey, "add": func(a, b int) int { return a + b }}).ParseFS(web, "web/*.html"))

// maxRows bounds the objects listed for a state, and maxEvents the events
// shown for an object.
const (
	maxRows   = 200
	maxEvents = 20
)

// handler serves the page, its parts and its event stream. On a loopback
// address it refuses requests for other host names.
func (d *Dashboard) handler(loopbackOnly bool) http.Handler {
	static, err := fs.Sub(web, "web/static")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.servePage)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /fragment/machines", d.serveMachines)
	mux.HandleFunc("GET /fragment/state", d.serveState)
	mux.HandleFunc("GET /fragment/object", d.serveObject)
	mux.HandleFunc("GET /fragment/search", d.serveSearch)
	mux.HandleFunc("GET /events", d.serveEvents)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		if loopbackOnly && !loopbackHost(r.Host) {
			http.Error(w, "the dashboard answers only to a loopback address, such as 127.0.0.1 or localhost", http.StatusMisdirectedRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

// loopback tells whether a listener's address is a loopback one.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// loopbackHost tells whether a request's Host names a loopback address.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.Trim(hostport, "[]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// render writes a template, or an error if it fails before writing.
func (d *Dashboard) render(w http.ResponseWriter, name string, view any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, view); err != nil {
		d.log.Printf("dashboard: rendering %s: %v", name, err)
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// pageView is the whole page.
type pageView struct {
	Host string
	// Window is how far back the arrows count, and Started when the
	// dashboard began to watch the transitions they count.
	Window, Started string
	Snapshot        string // JSON, for the page's first counts
	Body            machinesView
}

type machinesView struct {
	Version  int
	Error    string
	Machines []machineView
}

type machineView struct {
	Key, Name, Kind, Resource, Mode, KfsmVersion string
	Namespaced                                   bool
	SVG                                          template.HTML
}

func (d *Dashboard) machinesView() machinesView {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := machinesView{Version: d.version, Error: d.listErr}
	for _, w := range d.machines {
		v.Machines = append(v.Machines, machineView{
			Key: w.key, Name: w.Machine.Machine, Kind: w.PublishedGraph.Resource.Kind,
			Resource: w.GVR.GroupResource().String(), Mode: w.Graph.Mode.String(),
			KfsmVersion: w.KfsmVersion, Namespaced: w.Namespaced,
			// Drawn by svg, which escapes every name it writes.
			SVG: template.HTML(w.svg), //nolint:gosec // G203: built from escaped names only
		})
	}
	return v
}

func (d *Dashboard) servePage(w http.ResponseWriter, _ *http.Request) {
	snap, err := json.Marshal(d.snapshot(time.Now()))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	d.render(w, "page", pageView{Host: d.host, Window: shortDuration(d.window), Started: clock(d.started), Snapshot: string(snap), Body: d.machinesView()})
}

func (d *Dashboard) serveMachines(w http.ResponseWriter, _ *http.Request) {
	d.render(w, "machines", d.machinesView())
}

// stateView lists the objects in one state.
type stateView struct {
	Machine, State, Kind string
	Known, Synced        bool
	Rows                 []objectRow
	More                 int
}

type objectRow struct {
	Namespace, Name, Href, For, Ready, ReadyReason string
	Notes                                          []string
}

func (d *Dashboard) serveState(w http.ResponseWriter, r *http.Request) {
	m := d.machine(r.URL.Query().Get("machine"))
	if m == nil {
		http.Error(w, "no such machine", http.StatusNotFound)
		return
	}
	state := r.URL.Query().Get("state")
	_, known := m.Graph.Lookup(graph.State(state))
	for _, g := range m.Earlier {
		_, earlier := g.Lookup(graph.State(state))
		known = known || earlier
	}
	v := stateView{Machine: m.key, State: state, Kind: m.PublishedGraph.Resource.Kind, Known: known, Synced: m.synced()}
	now := time.Now()
	for _, o := range m.sorted() {
		if string(o.Status.State) != state {
			continue
		}
		if len(v.Rows) == maxRows {
			v.More++
			continue
		}
		v.Rows = append(v.Rows, row(m, o, now))
	}
	d.render(w, "state", v)
}

// sorted is the machine's objects by namespace and name.
func (w *watched) sorted() []inspect.Object {
	w.mu.Lock()
	out := make([]inspect.Object, 0, len(w.objects))
	for _, o := range w.objects {
		out = append(out, o)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func objectHref(machine string, o inspect.Object) string {
	return "#object/" + url.PathEscape(machine) + "/" + url.PathEscape(o.Namespace) + "/" + url.PathEscape(o.Name)
}

func stateHref(machine string, state fsm.State) string {
	return "#state/" + url.PathEscape(machine) + "/" + url.PathEscape(string(state))
}

// notes are what stands out about an object, in words.
func notes(m *inspect.Machine, o inspect.Object) []string {
	var out []string
	if note := m.VersionNote(o.Status.GraphVersion); note != "" {
		out = append(out, note)
	}
	if c := o.Condition(fsm.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
		out = append(out, "stalled: "+c.Message)
	}
	if o.Paused {
		out = append(out, "paused")
	}
	if o.Deleting {
		out = append(out, "being deleted")
	}
	if o.Status.Failures > 0 {
		out = append(out, fmt.Sprintf("%d failed attempts", o.Status.Failures))
	}
	return out
}

// objectView is one object: where it is, how it got there, what it is
// doing and what it made.
type objectView struct {
	Machine, Kind, Namespace, Name string
	Found                          bool
	State, StateHref, Since        string
	Notes                          []string
	Conditions                     []conditionRow
	Actions                        []actionRow
	Transitions                    []transitionRow
	Events                         []eventRow
	EventsError                    string
	Children                       []childRow
}

type conditionRow struct {
	Type, Status, Reason, Message, Age string
}

type transitionRow struct {
	Time, Stamp, From, To, Reason, Stayed string
	Current                               bool
}

type eventRow struct {
	Time, Stamp, Type, Reason, Action, Note string
	Count                                   int32
}

type childRow struct {
	Kind, Name, State string
	Adopted           bool
}

func (d *Dashboard) serveObject(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	m := d.machine(q.Get("machine"))
	if m == nil {
		http.Error(w, "no such machine", http.StatusNotFound)
		return
	}
	v := objectView{Machine: m.key, Kind: m.PublishedGraph.Resource.Kind, Namespace: q.Get("namespace"), Name: q.Get("name")}
	m.mu.Lock()
	o, found := m.objects[v.Namespace+"/"+v.Name]
	m.mu.Unlock()
	if !found {
		d.render(w, "object", v)
		return
	}
	now := time.Now()
	v.Found, v.State, v.StateHref, v.Notes = true, string(o.Status.State), stateHref(m.key, o.Status.State), notes(m.Machine, o)
	if o.Status.StateSince != nil {
		v.Since = shortDuration(now.Sub(o.Status.StateSince.Time))
	}
	for _, c := range o.Status.Conditions {
		v.Conditions = append(v.Conditions, conditionRow{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message, Age: shortDuration(now.Sub(c.LastTransitionTime.Time))})
	}
	v.Actions = actionRows(o, now)
	for i, t := range o.Status.History {
		row := transitionRow{Time: clock(t.Time.Time), Stamp: t.Time.UTC().Format(time.RFC3339), From: string(t.From), To: string(t.To), Reason: t.Reason}
		if i+1 < len(o.Status.History) {
			row.Stayed = shortDuration(o.Status.History[i+1].Time.Sub(t.Time.Time))
		} else {
			row.Stayed, row.Current = shortDuration(now.Sub(t.Time.Time)), true
		}
		v.Transitions = append(v.Transitions, row)
	}
	slices.Reverse(v.Transitions) // newest first, as the events
	for _, c := range o.Status.Outputs {
		kind := c.Kind
		if c.Group != "" {
			kind += "." + c.Group
		}
		name := c.Name
		if c.Namespace != "" {
			name = c.Namespace + "/" + c.Name
		}
		v.Children = append(v.Children, childRow{Kind: kind, Name: name, State: string(c.State), Adopted: c.Adopted != nil && *c.Adopted})
	}
	events, err := d.eventsOf(r.Context(), m, o)
	if err != nil {
		v.EventsError = err.Error()
	}
	for _, e := range events {
		at := eventTime(e)
		v.Events = append(v.Events, eventRow{Time: clock(at), Stamp: at.UTC().Format(time.RFC3339), Type: e.Type, Reason: e.Reason, Action: e.Action, Note: e.Note, Count: eventCount(e)})
	}
	d.render(w, "object", v)
}

// eventsOf lists the latest events about an object, newest first.
func (d *Dashboard) eventsOf(ctx context.Context, m *watched, o inspect.Object) ([]eventsv1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	namespace := metav1.NamespaceAll
	if m.Namespaced {
		namespace = o.Namespace
	}
	list, err := d.events.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "regarding.uid=" + o.UID})
	if err != nil {
		return nil, fmt.Errorf("listing the object's events: %w", err)
	}
	items := list.Items
	sort.SliceStable(items, func(i, j int) bool { return eventTime(items[i]).After(eventTime(items[j])) })
	if len(items) > maxEvents {
		items = items[:maxEvents]
	}
	return items, nil
}

// eventTime is when an event last happened.
func eventTime(e eventsv1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func eventCount(e eventsv1.Event) int32 {
	if e.Series != nil {
		return e.Series.Count
	}
	return max(e.DeprecatedCount, 1)
}

// clock is a time of day, in UTC as the API server keeps it.
func clock(t time.Time) string { return t.UTC().Format("15:04:05") }

// serveEvents streams the snapshot to the page whenever it changes.
func (d *Dashboard) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	_, _ = fmt.Fprint(w, "retry: 2000\n\n")
	flusher.Flush()
	if r.Method == http.MethodHead {
		return
	}
	updates, unsubscribe := d.hub.subscribe()
	defer unsubscribe()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case data, ok := <-updates:
			if !ok {
				return
			}
			if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", data); err != nil {
				return
			}
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
		}
		flusher.Flush()
	}
}
