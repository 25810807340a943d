//go:build linux

package rollout_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kfsm/kfsm/internal/proctest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// recorder stands between the operators and the API server: one proxy per
// process, which forwards to the API server with the test's credentials
// and logs every write as it arrives, with the process and its version
// of the graph, and what the API server answered. It runs in the test, so
// a process cannot hide a write from it.
type recorder struct {
	t         *testing.T
	upstream  *url.URL
	transport http.RoundTripper

	mu    sync.Mutex
	calls []*call
}

// call is one write of an operator, or one request of a Lease.
type call struct {
	process  string // the proxy it came through
	version  int    // the version of the graph that the process runs
	agent    string // its User-Agent
	method   string
	path     string
	at       time.Time // when it reached the proxy
	answered time.Time // when the API server's answer did; zero if none came
	code     int       // the API server's status code; 0 if it gave none (yet)

	// A write of a gadget: its name and, from the answer, the status it
	// has now and the object's resourceVersion.
	gadget       string
	state        string
	graphVersion int32
	rv           int64

	// A write of an event: its name and, for one created, its reason and
	// the gadget it regards.
	event, reason, regarding string

	// A request of a Lease: its holder, from the answer.
	lease, holder string
}

func (c *call) String() string {
	s := fmt.Sprintf("%s %s (v%d) %s %s → %d", c.at.Format("15:04:05.000"), c.process, c.version, c.method, c.path, c.code)
	switch {
	case c.gadget != "" && c.ok():
		s += fmt.Sprintf(" (state %s, graph version %d, rv %d)", c.state, c.graphVersion, c.rv)
	case c.reason != "":
		s += fmt.Sprintf(" (%s of %s)", c.reason, c.regarding)
	case c.lease != "" && c.ok():
		s += fmt.Sprintf(" (holder %q)", c.holder)
	}
	return s
}

func (c *call) ok() bool { return c.code >= 200 && c.code < 300 }

func (c *call) write() bool {
	switch c.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

func newRecorder(t *testing.T, cfg *rest.Config) *recorder {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &recorder{t: t, upstream: u, transport: rt}
}

// The paths of the writes that the recorder looks into.
var (
	gadgetPath = regexp.MustCompile(`/gadgets/([^/]+)(/status)?$`)
	eventPath  = regexp.MustCompile(`/apis/events\.k8s\.io/v1/namespaces/[^/]+/events(?:/([^/]+))?$`)
	leasePath  = regexp.MustCompile(`/leases/([^/]+)$`)
)

type callKey struct{}

// kubeconfig starts the proxy of one process, of version, and writes a
// kubeconfig that points at it, without credentials: the proxy adds the
// test's.
func (r *recorder) kubeconfig(process string, version int) string {
	r.t.Helper()
	proxy := &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { pr.SetURL(r.upstream) },
		Transport:      r.transport,
		FlushInterval:  -1, // watches stream
		ModifyResponse: r.answered,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := &call{process: process, version: version, agent: req.UserAgent(), method: req.Method, path: req.URL.Path, at: time.Now()}
		if !c.write() && !leasePath.MatchString(c.path) {
			proxy.ServeHTTP(w, req)
			return
		}
		r.look(c, req)
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
		proxy.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), callKey{}, c)))
	}))
	r.t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: srv.URL}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	name := filepath.Join(r.t.TempDir(), fmt.Sprintf("%s-v%d.kubeconfig", process, version))
	if err := clientcmd.WriteToFile(*cfg, name); err != nil {
		r.t.Fatal(err)
	}
	return name
}

// look notes what a write is of, before it goes on: the gadget, or the
// event it creates or patches, or the Lease.
func (r *recorder) look(c *call, req *http.Request) {
	if m := gadgetPath.FindStringSubmatch(c.path); m != nil {
		c.gadget = m[1]
		return
	}
	if m := leasePath.FindStringSubmatch(c.path); m != nil {
		c.lease = m[1]
		return
	}
	m := eventPath.FindStringSubmatch(c.path)
	if m == nil {
		return
	}
	c.event = m[1]
	if req.Method != http.MethodPost {
		return
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return
	}
	if ev, ok := decode(body).(*eventsv1.Event); ok {
		c.event, c.reason, c.regarding = ev.Name, ev.Reason, ev.Regarding.Name
	}
}

// answered notes the API server's answer to a write, and what it says of
// the gadget or the Lease written.
func (r *recorder) answered(resp *http.Response) error {
	c, _ := resp.Request.Context().Value(callKey{}).(*call)
	if c == nil {
		return nil
	}
	var g v1alpha1.Gadget
	var lease *coordinationv1.Lease
	if resp.StatusCode < 300 && (c.gadget != "" || c.lease != "") {
		body := readBody(resp)
		if c.gadget != "" {
			_ = json.Unmarshal(body, &g)
		} else {
			lease, _ = decode(body).(*coordinationv1.Lease)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c.code, c.answered = resp.StatusCode, time.Now()
	if g.Name != "" {
		c.state, c.graphVersion = string(g.Status.State), g.Status.GraphVersion
		c.rv, _ = strconv.ParseInt(g.ResourceVersion, 10, 64)
	}
	if lease != nil {
		c.holder = deref(lease.Spec.HolderIdentity)
	}
	return nil
}

// readBody reads a response's body and leaves it readable.
func readBody(resp *http.Response) []byte {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil || resp.Header.Get("Content-Encoding") != "gzip" {
		return body
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	plain, _ := io.ReadAll(zr)
	return plain
}

// decode decodes a built-in object, as JSON or protobuf.
func decode(body []byte) any {
	obj, _, err := serializer.NewCodecFactory(clientgoscheme.Scheme).UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return nil
	}
	return obj
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// all returns a copy of the calls that match, in the order they arrived.
func (r *recorder) all(match func(c *call) bool) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if match(c) {
			out = append(out, *c)
		}
	}
	return out
}

// gadgetWrites lists the writes of gadgets by process ("" for any) that
// arrived after since.
func (r *recorder) gadgetWrites(process string, since time.Time) []call {
	return r.all(func(c *call) bool {
		return c.gadget != "" && (process == "" || c.process == process) && c.at.After(since)
	})
}

// migrations returns, of each gadget, the first write of version 2 that
// the API server accepted: the migration, which recorded graph version 2.
func (r *recorder) migrations() map[string]call {
	out := map[string]call{}
	for _, c := range r.all(func(c *call) bool { return c.gadget != "" && c.version >= 2 && c.ok() && c.graphVersion >= 2 }) {
		if m, ok := out[c.gadget]; !ok || c.rv < m.rv {
			out[c.gadget] = c
		}
	}
	return out
}

// olderAfterNewer describes every write of a process of version 1 to a
// gadget after a process of version 2 wrote graph version 2 into it: one
// that reached the proxy after the API server had answered that write,
// or that the API server accepted after it, by their resourceVersions.
func (r *recorder) olderAfterNewer() []string {
	migrated := r.migrations()
	var out []string
	for _, c := range r.all(func(c *call) bool { return c.gadget != "" && c.version == 1 }) {
		m, ok := migrated[c.gadget]
		if ok && (c.at.After(m.answered) || c.ok() && c.rv > m.rv) {
			out = append(out, fmt.Sprintf("%s, after %s", &c, &m))
		}
	}
	return out
}

// told counts, of each gadget, the writes of process after since to the
// events with reason: their creations, and the patches of those events,
// which the event recorder sends when the same event recurs.
func (r *recorder) told(process, reason string, since time.Time) map[string]int {
	calls := r.all(func(c *call) bool { return c.process == process && c.event != "" && c.at.After(since) })
	regards := map[string]string{} // event → gadget
	out := map[string]int{}
	for _, c := range calls {
		if c.reason == reason {
			regards[c.event] = c.regarding
		}
		if g, ok := regards[c.event]; ok {
			out[g]++
		}
	}
	return out
}

// acquired is the first write with which process took the machine's Lease,
// at or after since.
func (r *recorder) acquired(process string, since time.Time) call {
	r.t.Helper()
	var found []call
	eventually(r.t, within, process+" to take the Lease "+lease, func() (bool, string) {
		found = r.all(func(c *call) bool {
			return c.process == process && c.write() && c.lease == lease && c.holder == process && !c.at.Before(since)
		})
		return len(found) > 0, ""
	})
	return found[0]
}

// readLease waits until process reads the Lease named lease after
// since. Its first read means that its manager runs with its caches
// synced, as controller-runtime elects only then.
func (r *recorder) readLease(process, lease string, since time.Time, within time.Duration) {
	r.t.Helper()
	eventually(r.t, within, process+" to read the Lease "+lease, func() (bool, string) {
		return len(r.all(func(c *call) bool {
			return c.process == process && c.method == http.MethodGet && c.lease == lease && c.at.After(since)
		})) > 0, ""
	})
}

// checkAgents fails the test if a request came through a process's proxy
// with another process's User-Agent: each process must have used its own.
func (r *recorder) checkAgents() {
	r.t.Helper()
	for _, c := range r.all(func(*call) bool { return true }) {
		if c.agent != "rollout-operator/"+c.process {
			r.t.Errorf("a request through %s's proxy came from %q: %s", c.process, c.agent, &c)
		}
	}
}

// dump logs the calls, to read when a test fails, but for the heartbeats:
// the writes of gadgets that changed neither their state nor their graph
// version.
func (r *recorder) dump() {
	r.t.Helper()
	var b strings.Builder
	last := map[string]call{}
	skipped := 0
	for _, c := range r.all(func(*call) bool { return true }) {
		if p, ok := last[c.gadget]; ok && c.ok() && c.state == p.state && c.graphVersion == p.graphVersion {
			skipped++
			continue
		}
		if c.gadget != "" && c.ok() {
			last[c.gadget] = c
		}
		fmt.Fprintln(&b, c.String())
	}
	r.t.Logf("the recorder's log, without %d heartbeats:\n%s", skipped, b.String())
}

// eventually polls cond until it holds, and fails the test with cond's
// last word after within, or at once if the test has failed meanwhile (a
// process died).
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	proctest.Eventually(t, within, what, cond)
}
