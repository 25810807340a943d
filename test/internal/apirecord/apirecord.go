// Package apirecord stands between operator processes and the API server:
// one proxy per process, which forwards to the API server with the test's
// credentials and records every write and every request of a Lease as it
// arrives, with the process, the version of the graph it runs, and what
// the API server answered. It runs in the test, so a process cannot hide
// a request from it. The suites of kfsm that run operators as processes
// ask it what each process wrote, and when.
package apirecord

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
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// Recorder records the requests of the processes whose proxies it
// started.
type Recorder struct {
	t         testing.TB
	upstream  *url.URL
	transport http.RoundTripper

	mu     sync.Mutex
	calls  []*Call
	status map[string]v1alpha1.GadgetStatus // of each gadget, as its last answered write left it
}

// Call is one write of an operator process, or one request of a Lease.
type Call struct {
	Process  string // the proxy it came through
	Version  int    // the version of the graph that the process runs, if the test gave one
	Agent    string // its User-Agent
	Method   string
	Path     string
	At       time.Time // when it reached the proxy
	Answered time.Time // when the API server's answer did; zero if none came
	Code     int       // the API server's status code; 0 if it gave none (yet)

	// A write of a gadget: its name and, from the answer, the status it
	// has now and the object's resourceVersion. An answer of the metadata
	// alone, which kfsm asks of its status writes, gives the version; the
	// status is then the one the last answered write left, changed as the
	// write's merge patch says.
	Gadget       string
	State        string
	GraphVersion int32
	RV           int64
	patch        []byte // the body of a status write

	// A write of an event: its name and, for one created, its reason and
	// the gadget it regards.
	Event, Reason, Regarding string

	// A request of a Lease: its name and, from the answer, its holder and
	// transitions.
	Lease, Holder string
	Transitions   int32
}

func (c *Call) String() string {
	s := fmt.Sprintf("%s %s", c.At.Format("15:04:05.000"), c.Process)
	if c.Version > 0 {
		s += fmt.Sprintf(" (v%d)", c.Version)
	}
	s += fmt.Sprintf(" %s %s → %d", c.Method, c.Path, c.Code)
	switch {
	case c.Gadget != "" && c.OK():
		s += fmt.Sprintf(" (state %s, graph version %d, rv %d)", c.State, c.GraphVersion, c.RV)
	case c.Reason != "":
		s += fmt.Sprintf(" (%s of %s)", c.Reason, c.Regarding)
	case c.Lease != "" && c.OK():
		s += fmt.Sprintf(" (holder %q, transitions %d)", c.Holder, c.Transitions)
	}
	return s
}

// OK reports whether the API server accepted the call.
func (c *Call) OK() bool { return c.Code >= 200 && c.Code < 300 }

// Write reports whether the call was a write.
func (c *Call) Write() bool {
	switch c.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// New returns a recorder whose proxies forward to the API server of cfg,
// with its credentials.
func New(t testing.TB, cfg *rest.Config) *Recorder {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Recorder{t: t, upstream: u, transport: rt}
}

// The paths of the requests that the recorder looks into.
var (
	gadgetPath = regexp.MustCompile(`/gadgets/([^/]+)(/status)?$`)
	eventPath  = regexp.MustCompile(`/apis/events\.k8s\.io/v1/namespaces/[^/]+/events(?:/([^/]+))?$`)
	leasePath  = regexp.MustCompile(`/leases/([^/]+)$`)
)

type callKey struct{}

// Kubeconfig starts the proxy of one process, of the graph's version (0
// if the test runs one), and writes a kubeconfig that points at it,
// without credentials: the proxy adds the test's.
func (r *Recorder) Kubeconfig(process string, version int) string {
	r.t.Helper()
	proxy := &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { pr.SetURL(r.upstream) },
		Transport:      r.transport,
		FlushInterval:  -1, // watches stream
		ModifyResponse: r.answered,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := &Call{Process: process, Version: version, Agent: req.UserAgent(), Method: req.Method, Path: req.URL.Path, At: time.Now()}
		if !c.Write() && !leasePath.MatchString(c.Path) {
			proxy.ServeHTTP(w, req)
			return
		}
		look(c, req)
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

// look notes what a call is of, before it goes on: the gadget, or the
// event it creates or patches, or the Lease.
func look(c *Call, req *http.Request) {
	if m := gadgetPath.FindStringSubmatch(c.Path); m != nil {
		c.Gadget = m[1]
		if m[2] != "" && req.Method == http.MethodPatch {
			c.patch = readRequest(req)
		}
		return
	}
	if m := leasePath.FindStringSubmatch(c.Path); m != nil {
		c.Lease = m[1]
		return
	}
	m := eventPath.FindStringSubmatch(c.Path)
	if m == nil {
		return
	}
	c.Event = m[1]
	if req.Method != http.MethodPost {
		return
	}
	if ev, ok := decode(readRequest(req)).(*eventsv1.Event); ok {
		c.Event, c.Reason, c.Regarding = ev.Name, ev.Reason, ev.Regarding.Name
	}
}

// answered notes the API server's answer to a call, and what it says of
// the gadget or the Lease.
func (r *Recorder) answered(resp *http.Response) error {
	c, _ := resp.Request.Context().Value(callKey{}).(*Call)
	if c == nil {
		return nil
	}
	var g v1alpha1.Gadget
	var meta *metav1.PartialObjectMetadata
	var lease *coordinationv1.Lease
	if resp.StatusCode < 300 && (c.Gadget != "" || c.Lease != "") {
		body := readBody(resp)
		if c.Gadget != "" {
			if meta, _ = decode(body).(*metav1.PartialObjectMetadata); meta == nil {
				_ = json.Unmarshal(body, &g)
			}
		} else {
			lease, _ = decode(body).(*coordinationv1.Lease)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c.Code, c.Answered = resp.StatusCode, time.Now()
	if meta != nil {
		g.ObjectMeta, g.Status = meta.ObjectMeta, r.status[c.Gadget]
		_ = json.Unmarshal(c.patch, &g)
	}
	if g.Name != "" {
		if r.status == nil {
			r.status = map[string]v1alpha1.GadgetStatus{}
		}
		r.status[c.Gadget] = g.Status
		c.State, c.GraphVersion = string(g.Status.State), g.Status.GraphVersion
		c.RV, _ = strconv.ParseInt(g.ResourceVersion, 10, 64)
	}
	if lease != nil {
		c.Holder, c.Transitions = deref(lease.Spec.HolderIdentity), deref(lease.Spec.LeaseTransitions)
	}
	return nil
}

// readRequest reads a request's body and leaves it readable.
func readRequest(req *http.Request) []byte {
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	return body
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

// answers decodes the built-in kinds, and the metadata alone of any kind.
var answers = func() runtime.Decoder {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(metav1.AddMetaToScheme(s))
	return serializer.NewCodecFactory(s).UniversalDeserializer()
}()

// decode decodes a built-in object or an object's metadata, as JSON or
// protobuf.
func decode(body []byte) any {
	obj, _, err := answers.Decode(body, nil, nil)
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

// All returns a copy of the calls that match, in the order they arrived.
func (r *Recorder) All(match func(c *Call) bool) []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Call
	for _, c := range r.calls {
		if match(c) {
			out = append(out, *c)
		}
	}
	return out
}

// CheckAgents fails the test if a request came through a process's proxy
// with another User-Agent than program/process: each process must have
// used its own.
func (r *Recorder) CheckAgents(program string) {
	r.t.Helper()
	for _, c := range r.All(func(*Call) bool { return true }) {
		if c.Agent != program+"/"+c.Process {
			r.t.Errorf("a request through %s's proxy came from %q: %s", c.Process, c.Agent, &c)
		}
	}
}
