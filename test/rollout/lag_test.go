//go:build linux

package rollout_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kfsm/kfsm/internal/proctest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// A leader of version 1 whose watch of the gadgets lags takes over from
// a leader of version 2: its cache shows a gadget as version 1 left it,
// but the API server has it migrated. The new leader must not act on
// that copy: it catches up with the API server before it moves anything.
func TestALaggingNewLeaderDoesNotActOnItsStaleCache(t *testing.T) {
	const lag = 6 * time.Second
	bin := proctest.Build(t, "./internal/operator")
	s := newScenario(t, bin, "leader", false)
	b := s.start("b", 2)
	s.rec.acquired("b", time.Time{})

	kc := laggingKubeconfig(t, s.rec.kubeconfig("a", 1), lag)
	a := s.run.startWith(t, "a", 1, kc)
	s.rec.readLease("a", lease, time.Time{}, within)

	s.env.Create(&v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: "g-new"}, Spec: v1alpha1.GadgetSpec{Target: 1}})
	s.await("b to move g-new", func(g *v1alpha1.Gadget) bool { return g.Status.GraphVersion == 2 && g.Status.State == "New" })
	termB := b.stop()
	s.rec.acquired("a", termB)
	time.Sleep(lag + 2*time.Second) // past the lag: a's cache has caught up
	if g := s.gadgets()["g-new"]; g.Status.State != "New" || g.Status.GraphVersion != 2 {
		t.Errorf("with a (version 1) leading, g-new is in %s at graph version %d, history %s; want New at 2, left alone",
			g.Status.State, g.Status.GraphVersion, history(g.Status.History))
	}
	if late := s.rec.olderAfterNewer(); len(late) > 0 {
		t.Errorf("version 1 wrote after version 2: %v", late)
	}
	a.stop()
}

// laggingKubeconfig puts a proxy in front of the server of kubeconfig
// that delays every watch of gadgets by lag, and returns a kubeconfig
// that points at it.
func laggingKubeconfig(t *testing.T, kubeconfig string, lag time.Duration) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	up, err := url.Parse(cfg.Clusters["proxy"].Server)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) }, FlushInterval: -1}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet || req.URL.Query().Get("watch") != "true" || !strings.Contains(req.URL.Path, "/gadgets") {
			proxy.ServeHTTP(w, req)
			return
		}
		d := &delayed{w: w, lag: lag, ch: make(chan chunk, 100000), done: make(chan struct{})}
		go d.pump(req.Context().Done())
		defer func() {
			close(d.ch)
			<-d.done
		}()
		proxy.ServeHTTP(d, req)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	cfg.Clusters["proxy"].Server = srv.URL
	name := filepath.Join(t.TempDir(), "lagging.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, name); err != nil {
		t.Fatal(err)
	}
	return name
}

type chunk struct {
	b   []byte
	due time.Time
}

// delayed writes what it is given lag later.
type delayed struct {
	w    http.ResponseWriter
	lag  time.Duration
	ch   chan chunk
	done chan struct{}
}

func (d *delayed) Header() http.Header { return d.w.Header() }

func (d *delayed) WriteHeader(code int) {
	d.w.WriteHeader(code)
	d.w.(http.Flusher).Flush()
}

func (d *delayed) Write(b []byte) (int, error) {
	d.ch <- chunk{b: append([]byte(nil), b...), due: time.Now().Add(d.lag)}
	return len(b), nil
}

func (d *delayed) Flush() {}

func (d *delayed) pump(gone <-chan struct{}) {
	defer close(d.done)
	for c := range d.ch {
		select {
		case <-gone:
			continue // drain
		case <-time.After(time.Until(c.due)):
		}
		_, _ = d.w.Write(c.b)
		d.w.(http.Flusher).Flush()
	}
}
