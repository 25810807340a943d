// Package dashboard serves a read-only live web view of the kfsm machines
// in a cluster: each machine's graph with the number of objects in each
// state and the recent transitions on each edge, the objects in a state,
// and one object's timeline, conditions, actions and children.
//
// It finds machines by the graphs they publish on their resources'
// CustomResourceDefinitions (package inspect), watches each machine's
// resource, and pushes the counts to the page as server-sent events, so
// that the page follows the cluster without reloading. Everything it
// serves is built into the binary: no script, style or font comes from
// the network.
//
// A graph is laid out once for each of its versions, by Graphviz's dot,
// which runs in the binary as WebAssembly, and drawn as inline SVG; a
// graph too long to read on a screen is folded into bands set side by
// side, with the edges between bands routed around them. The native code
// that the WebAssembly is compiled into is cached in the user's cache
// directory if only the user may write it, or else kept in memory; never
// in the temporary directory that the machine's users share (package
// graphvizcache).
//
// # Guarantees
//
//   - It only reads: its requests to the API server are get, list and
//     watch, on CustomResourceDefinitions (their metadata), on the machines'
//     resources and on events.k8s.io events. It never reads a Secret, nor
//     any object a machine applied: children are shown by the references in
//     the parent's status.
//   - It answers only GET and HEAD; any other method gets 405 Method Not
//     Allowed.
//   - On a loopback address it answers only requests addressed to a
//     loopback name, so that a web page elsewhere cannot read it through a
//     name it points at 127.0.0.1.
//
// # Assumptions
//
// Its identity may get, list and watch customresourcedefinitions and the
// machines' resources, and list events.k8s.io events; an object's panel
// says so when its events cannot be listed. A machine's objects are listed
// once and then watched, so the dashboard keeps in memory, for each object,
// its name and its kfsm status, not its spec.
//
// # Caveats
//
// The counts on the edges come from the transitions the dashboard has
// seen: it reads each version of each object that its watch delivers and
// keeps the transitions of the window from their status.history, those of
// objects deleted since included. Before it started, it knows only what
// the histories keep (ten transitions an object, unless the machine says
// otherwise). An object that moves more often than its history keeps
// between two versions the dashboard reads, as can happen when its watch
// breaks and it lists again, loses transitions; the page counts such gaps.
//
// Every program that links the package starts Graphviz before main,
// whether it lays out a graph or not: go-graphviz compiles its
// WebAssembly when it is initialised, and offers no way to wait. The
// first start with an empty cache compiles (about half a second); later
// ones load the code from the cache (some tens of milliseconds).
package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
)

// Options change what the dashboard shows.
type Options struct {
	// Window is how far back the counts on the edges look; the default is
	// five minutes.
	Window time.Duration
	// ErrorLog receives what goes wrong while serving; the default is the
	// log package's standard logger.
	ErrorLog *log.Logger
}

// Dashboard is the web view of one cluster.
type Dashboard struct {
	cluster inspect.Cluster
	events  kubernetes.Interface
	host    string
	window  time.Duration
	started time.Time
	log     *log.Logger

	// changed wakes the publisher when something it shows changed.
	changed chan struct{}
	// crdsChanged wakes the discovery of machines.
	crdsChanged chan struct{}
	hub         *hub
	// running counts the goroutines of the machines' watches.
	running sync.WaitGroup

	mu       sync.Mutex
	machines []*watched // sorted by key
	version  int        // of the set of machines and their graphs
	listErr  string     // why the machines could not be listed
	nextID   int
}

// watched is a machine and its objects, as a watch on its resource keeps
// them.
type watched struct {
	*inspect.Machine
	key      string // names the machine in the page and its addresses
	identity string // what makes a machine the same one: a new graph is a new machine
	svg      string
	stop     context.CancelFunc
	synced   func() bool // whether the first list is in

	mu      sync.Mutex
	objects map[string]inspect.Object // by namespace/name
	ledger  *ledger
	rev     uint64
}

// New returns a dashboard of the cluster that cfg reaches. It starts
// nothing; Serve does.
func New(cfg *rest.Config, opts Options) (*Dashboard, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "kfsm-dashboard"
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	events, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	d := &Dashboard{
		cluster: inspect.Cluster{Dynamic: dyn, Metadata: meta, Mapper: mapper},
		events:  events, host: cfg.Host, window: opts.Window, log: opts.ErrorLog, started: time.Now(),
		changed: make(chan struct{}, 1), crdsChanged: make(chan struct{}, 1), hub: newHub(),
	}
	if d.window <= 0 {
		d.window = 5 * time.Minute
	}
	if d.log == nil {
		d.log = log.Default()
	}
	if graphvizCache != nil {
		d.log.Printf("dashboard: %v; Graphviz's compiled code is kept in memory only", graphvizCache)
	}
	return d, nil
}

// Serve serves the dashboard on l until ctx ends, and then returns nil
// once its watches and connections have stopped. A dashboard serves once.
func (d *Dashboard) Serve(ctx context.Context, l net.Listener) error {
	// On return: the watches stop, then everything started here.
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		d.running.Wait()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer d.stopAll()

	crds := metadatainformer.NewFilteredMetadataInformer(d.cluster.Metadata, crdResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	notify := func(any) { signal(d.crdsChanged) }
	if _, err := crds.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify, UpdateFunc: func(_, o any) { notify(o) }, DeleteFunc: notify,
	}); err != nil {
		return err
	}
	wg.Go(func() { crds.RunWithContext(ctx) })
	wg.Go(func() { d.discover(ctx) })
	wg.Go(func() { d.publish(ctx) })

	srv := &http.Server{
		Handler:           d.handler(loopback(l.Addr())),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          d.log,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// The event streams end with ctx; other requests get a few seconds.
	shutdown, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	if err := srv.Shutdown(shutdown); err != nil {
		return errors.Join(err, srv.Close())
	}
	return nil
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// signal wakes whoever waits on ch, once however often it is called.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// discover keeps the set of watched machines that of the graphs published
// in the cluster, whenever a CustomResourceDefinition changes.
func (d *Dashboard) discover(ctx context.Context) {
	retry := time.NewTimer(0)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.crdsChanged:
		case <-retry.C:
		}
		// CRDs change in bursts, as when an operator installs several.
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		if err := d.refresh(ctx); err != nil && ctx.Err() == nil {
			d.log.Printf("dashboard: listing machines: %v", err)
			retry.Reset(2 * time.Second)
		}
	}
}

// refresh lists the machines and watches the new ones.
func (d *Dashboard) refresh(ctx context.Context) error {
	found, err := d.cluster.Machines(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	defer signal(d.changed)
	if err != nil {
		if msg := err.Error(); msg != d.listErr {
			d.listErr = msg
			d.version++
		}
		return err
	}
	if d.listErr != "" {
		d.listErr = ""
		d.version++
	}
	names := map[string]int{}
	for _, m := range found {
		names[m.Machine]++
	}
	old := map[string]*watched{}
	for _, w := range d.machines {
		old[w.identity] = w
	}
	var now []*watched
	changed := false
	for _, m := range found {
		key := m.Machine
		if names[m.Machine] > 1 {
			key = m.GVR.GroupResource().String() + ":" + m.Machine
		}
		identity := key + "\x00" + m.GVR.String() + "\x00" + string(m.PublishedGraph.Graph)
		if w := old[identity]; w != nil {
			delete(old, identity)
			now = append(now, w)
			continue
		}
		now = append(now, d.watch(ctx, key, identity, m))
		changed = true
	}
	for _, w := range old {
		w.stop()
		changed = true
	}
	slices.SortFunc(now, func(a, b *watched) int { return strings.Compare(a.key, b.key) })
	d.machines = now
	if changed {
		d.version++
	}
	return nil
}

// watch starts watching a machine's objects.
func (d *Dashboard) watch(ctx context.Context, key, identity string, m *inspect.Machine) *watched {
	d.nextID++
	w := &watched{Machine: m, key: key, identity: identity, objects: map[string]inspect.Object{}, ledger: newLedger(m.Graph)}
	w.svg = layout(key, fmt.Sprintf("m%d", d.nextID), m.Graph).svg()
	inf := dynamicinformer.NewFilteredDynamicInformer(d.cluster.Dynamic, m.GVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	if err := inf.SetTransform(trim); err != nil {
		d.log.Printf("dashboard: machine %s: %v", key, err)
	}
	put := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		o, err := inspect.FromUnstructured(u)
		if err != nil {
			d.log.Printf("dashboard: machine %s: %v", key, err)
		}
		o.Unstructured = nil
		w.mu.Lock()
		var before *inspect.Object
		if b, ok := w.objects[o.Namespace+"/"+o.Name]; ok && b.UID == o.UID {
			before = &b
		}
		w.ledger.record(before, o, time.Now().Add(-d.window))
		w.objects[o.Namespace+"/"+o.Name] = o
		w.rev++
		w.mu.Unlock()
		signal(d.changed)
	}
	remove := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		w.mu.Lock()
		delete(w.objects, u.GetNamespace()+"/"+u.GetName())
		w.rev++
		w.mu.Unlock()
		signal(d.changed)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: put, UpdateFunc: func(_, o any) { put(o) }, DeleteFunc: remove,
	}); err != nil {
		d.log.Printf("dashboard: machine %s: %v", key, err)
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.synced = inf.HasSynced
	d.running.Go(func() { inf.RunWithContext(ctx) })
	d.running.Go(func() {
		// The first count after the initial list, even if it was empty.
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			signal(d.changed)
		}
	})
	return w
}

func (d *Dashboard) stopAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.machines {
		w.stop()
	}
}

// trim keeps of an object what the dashboard shows: its name, its kfsm
// annotations and its status. The spec, other annotations, labels and
// managed fields are not kept.
func trim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetGeneration(u.GetGeneration())
	out.SetCreationTimestamp(u.GetCreationTimestamp())
	out.SetDeletionTimestamp(u.GetDeletionTimestamp())
	kept := map[string]string{}
	for _, k := range []string{fsm.AnnotationPaused, fsm.AnnotationRetry} {
		if v, ok := u.GetAnnotations()[k]; ok {
			kept[k] = v
		}
	}
	if len(kept) > 0 {
		out.SetAnnotations(kept)
	}
	if status, ok := u.Object["status"]; ok {
		out.Object["status"] = status
	}
	return out, nil
}

// snapshot is what the page keeps up to date.
type snapshot struct {
	// Version changes with the set of machines or their graphs; the page
	// then fetches them again.
	Version  int      `json:"version"`
	Machines []counts `json:"machines"`
}

func (d *Dashboard) snapshot(now time.Time) snapshot {
	d.mu.Lock()
	machines, version := d.machines, d.version
	d.mu.Unlock()
	s := snapshot{Version: version, Machines: make([]counts, 0, len(machines))}
	for _, w := range machines {
		w.mu.Lock()
		objects := make([]inspect.Object, 0, len(w.objects))
		for _, o := range w.objects {
			objects = append(objects, o)
		}
		rev, edges, gaps := w.rev, w.ledger.count(now.Add(-d.window)), w.ledger.gaps
		w.mu.Unlock()
		c := countObjects(w.Graph, objects)
		c.Key, c.Rev, c.Synced, c.Edges, c.Gaps = w.key, rev, w.synced(), edges, gaps
		s.Machines = append(s.Machines, c)
	}
	return s
}

// publish sends the snapshot to the pages when it changed, looking at
// most four times a second, and at least every five seconds, as the
// window moves on.
func (d *Dashboard) publish(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	dirty, last := true, time.Time{}
	for {
		select {
		case <-ctx.Done():
			d.hub.close()
			return
		case <-d.changed:
			dirty = true
			continue
		case now := <-tick.C:
			if !dirty && now.Sub(last) < 5*time.Second {
				continue
			}
			data, err := json.Marshal(d.snapshot(now))
			if err != nil {
				d.log.Printf("dashboard: %v", err)
				continue
			}
			d.hub.publish(data)
			dirty, last = false, now
		}
	}
}

// machine finds a watched machine by key.
func (d *Dashboard) machine(key string) *watched {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.machines {
		if w.key == key {
			return w
		}
	}
	return nil
}

// hub hands the latest snapshot to every open page. A page that is slow
// to read misses snapshots in between, never the latest.
type hub struct {
	mu     sync.Mutex
	last   []byte
	subs   map[chan []byte]bool
	closed bool
}

func newHub() *hub { return &hub{subs: map[chan []byte]bool{}} }

func (h *hub) publish(data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if string(data) == string(h.last) {
		return
	}
	h.last = data
	for ch := range h.subs {
		offer(ch, data)
	}
}

// offer replaces what ch holds with data.
func offer(ch chan []byte, data []byte) {
	for {
		select {
		case ch <- data:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// subscribe returns a channel that gets the latest snapshot, now if there
// is one, and is closed when the hub closes.
func (h *hub) subscribe() (<-chan []byte, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan []byte, 1)
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	if h.last != nil {
		ch <- h.last
	}
	h.subs[ch] = true
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.subs[ch] {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}
