//go:build linux

package failover_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kfsm/kfsm/internal/proctest"
)

// recorder stands between the operators and the API server: one proxy per
// process, which forwards to the API server with the test's credentials
// and logs every write and every request on a Lease, as it arrives. It
// runs in the test, so a process cannot hide a request from it.
type recorder struct {
	t         *testing.T
	upstream  *url.URL
	transport http.RoundTripper

	mu    sync.Mutex
	calls []*call
}

// call is one request of an operator: a write, or any request on a Lease.
type call struct {
	process string // the proxy it came through
	agent   string // its User-Agent
	method  string
	path    string
	at      time.Time // when it reached the proxy
	code    int       // the API server's status code; 0 if it gave none (yet)
	// For a Lease that the API server returned after a write, its holder
	// and transitions.
	lease       bool
	holder      string
	transitions int32
}

func (c *call) String() string {
	s := fmt.Sprintf("%s %s %s %s → %d", c.at.Format("15:04:05.000"), c.process, c.method, c.path, c.code)
	if c.lease {
		s += fmt.Sprintf(" (holder %q, transitions %d)", c.holder, c.transitions)
	}
	return s
}

func (c *call) write() bool {
	switch c.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

func (c *call) ok() bool { return c.code >= 200 && c.code < 300 }

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

type callKey struct{}

// kubeconfig starts the proxy of one process and writes a kubeconfig that
// points at it, without credentials: the proxy adds the test's.
func (r *recorder) kubeconfig(process string) string {
	r.t.Helper()
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(r.upstream) },
		Transport:     r.transport,
		FlushInterval: -1, // watches stream
		ModifyResponse: func(resp *http.Response) error {
			c, _ := resp.Request.Context().Value(callKey{}).(*call)
			if c == nil {
				return nil
			}
			var lease *coordinationv1.Lease
			if c.write() && resp.StatusCode < 300 {
				lease = readLease(resp)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			c.code = resp.StatusCode
			if lease != nil {
				c.lease, c.holder, c.transitions = true, deref(lease.Spec.HolderIdentity), deref(lease.Spec.LeaseTransitions)
			}
			return nil
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c := &call{process: process, agent: req.UserAgent(), method: req.Method, path: req.URL.Path, at: time.Now()}
		if c.write() || strings.Contains(c.path, "/leases") {
			r.mu.Lock()
			r.calls = append(r.calls, c)
			r.mu.Unlock()
			req = req.WithContext(context.WithValue(req.Context(), callKey{}, c))
		}
		proxy.ServeHTTP(w, req)
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
	name := filepath.Join(r.t.TempDir(), process+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, name); err != nil {
		r.t.Fatal(err)
	}
	return name
}

// readLease decodes the Lease in a response, which stays readable. The
// API server compresses only far larger responses.
func readLease(resp *http.Response) *coordinationv1.Lease {
	if !strings.Contains(resp.Request.URL.Path, "/leases") {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	obj, _, err := serializer.NewCodecFactory(clientgoscheme.Scheme).UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return nil
	}
	lease, _ := obj.(*coordinationv1.Lease)
	return lease
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

// first waits until a call matches, and returns it.
func (r *recorder) first(what string, within time.Duration, match func(c *call) bool) call {
	r.t.Helper()
	var found []call
	eventually(r.t, within, what, func() bool {
		found = r.all(match)
		return len(found) > 0
	})
	return found[0]
}

// acquired is the first write with which process took the Lease, at or
// after since: a standby writes to the Lease only to take it.
func (r *recorder) acquired(process string, since time.Time, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to take the Lease", within, func(c *call) bool {
		return c.process == process && !c.at.Before(since) && c.lease && c.holder == process
	})
}

// released is the write with which process gave the Lease up.
func (r *recorder) released(process string, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to release the Lease", within, func(c *call) bool {
		return c.process == process && c.lease && c.holder == ""
	})
}

// reconciled is the first status write of the ticker gadget by process,
// at or after since, that the API server accepted.
func (r *recorder) reconciled(process string, since time.Time, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to write the ticker's status", within, func(c *call) bool {
		return c.process == process && !c.at.Before(since) && c.ok() && c.method == http.MethodPatch &&
			strings.HasSuffix(c.path, "/gadgets/ticker/status")
	})
}

// renewed is the first write with which process, holding the Lease,
// renewed it after since.
func (r *recorder) renewed(process string, since time.Time, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to renew the Lease", within, func(c *call) bool {
		return c.process == process && c.at.After(since) && c.lease && c.holder == process
	})
}

// lastRenewal is the last write with which process acquired or renewed
// the Lease before t.
func (r *recorder) lastRenewal(process string, t time.Time) call {
	r.t.Helper()
	renewals := r.all(func(c *call) bool { return c.process == process && c.at.Before(t) && c.lease && c.holder == process })
	if len(renewals) == 0 {
		r.t.Fatalf("%s never held the Lease before %s", process, t.Format("15:04:05.000"))
	}
	return renewals[len(renewals)-1]
}

// readLease is the first time that process read the Lease after since.
// Its first read means that its manager runs with its caches synced, as
// controller-runtime elects only then.
func (r *recorder) readLease(process string, since time.Time, within time.Duration) call {
	r.t.Helper()
	return r.first(process+" to read the Lease", within, func(c *call) bool {
		return c.process == process && c.at.After(since) && c.method == http.MethodGet && strings.Contains(c.path, "/leases/")
	})
}

// writesAfter lists the writes of process that arrived after t.
func (r *recorder) writesAfter(process string, t time.Time) []call {
	return r.all(func(c *call) bool { return c.process == process && c.write() && c.at.After(t) })
}

// checkAgents fails the test if a request came through a process's proxy
// with another process's User-Agent: each process must have used its own.
func (r *recorder) checkAgents() {
	r.t.Helper()
	for _, c := range r.all(func(*call) bool { return true }) {
		if c.agent != "failover-operator/"+c.process {
			r.t.Errorf("a request through %s's proxy came from %q: %s", c.process, c.agent, &c)
		}
	}
}

// dump logs every call, to read when a test fails.
func (r *recorder) dump() {
	r.t.Helper()
	var b strings.Builder
	for _, c := range r.all(func(*call) bool { return true }) {
		fmt.Fprintln(&b, c.String())
	}
	r.t.Logf("the recorder's log:\n%s", b.String())
}

// eventually polls cond until it holds, and fails the test after within,
// or at once if the test has failed meanwhile (a process died).
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	proctest.Eventually(t, within, what, func() (bool, string) { return cond(), "" })
}
