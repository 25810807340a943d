package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kfsm/kfsm/cmd/internal/inspect"
	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/fsmtest"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

// One API server serves the package's tests. Only the browser test
// creates doors, so the counts it reads are its own.
func TestMain(m *testing.M) {
	if what := os.Getenv(graphvizChildEnv); what != "" {
		os.Exit(graphvizChild(what))
	}
	fsmtest.Main(m, fsmtest.Options{
		CRDPaths:    []string{filepath.Join("..", "..", "..", "internal", "testapi", "crd")},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
	})
}

// doors is the README's door: closed until its spec asks for it open.
func doors() *fsm.Machine[*v1alpha1.Door] {
	return fsm.New[*v1alpha1.Door]("door", fsm.Lifecycle).
		Initial("Closed").
		State("Closed", func(_ context.Context, r *fsm.Request[*v1alpha1.Door]) fsm.Result {
			if r.Object.Spec.Open {
				return fsm.Next("Open")
			}
			return fsm.Done()
		}, fsm.To("Open")).
		State("Open", func(_ context.Context, r *fsm.Request[*v1alpha1.Door]) fsm.Result {
			if !r.Object.Spec.Open {
				return fsm.Next("Closed")
			}
			return fsm.Done()
		}, fsm.To("Closed"), fsm.Timeout(time.Hour, "Closed")).
		OnDelete("Removed").
		State("Removed", nil, fsm.Final())
}

// served is a dashboard serving on loopback for one test.
type served struct {
	url string
	// requests are those the dashboard made to the API server.
	requests *requestLog
}

// serve starts a dashboard of the package's cluster; it stops when the
// test ends, and the test fails if it does not stop cleanly.
func serve(t *testing.T, e *fsmtest.Env) *served {
	t.Helper()
	s := &served{requests: &requestLog{}}
	cfg := e.Config()
	cfg.Wrap(s.requests.wrap)
	d, err := New(cfg, Options{ErrorLog: log.New(testWriter{t}, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + l.Addr().String() + "/"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v, want nil once its context ended", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return within 30s of its context's end")
		}
	})
	return s
}

// requestLog keeps the method and path of every request made through it.
type requestLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.seen = append(l.seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (l *requestLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// checkReadOnly fails the test if the dashboard asked the API server for
// anything but reads, or for anything about Secrets.
func (s *served) checkReadOnly(t *testing.T) {
	t.Helper()
	requests := s.requests.all()
	if len(requests) == 0 {
		t.Error("the dashboard made no request to the API server, so the check of its requests proves nothing")
	}
	for _, r := range requests {
		if !strings.HasPrefix(r, "GET ") {
			t.Errorf("the dashboard made a request that is not a read: %s", r)
		}
		if strings.Contains(strings.ToLower(r), "secret") {
			t.Errorf("the dashboard made a request about Secrets: %s", r)
		}
	}
}

// Any method but GET and HEAD is refused, on every path, and so is a
// request addressed to a name that is not loopback.
func TestOnlyReadsAreServed(t *testing.T) {
	e := fsmtest.New(t)
	s := serve(t, e)
	cases := map[string]struct {
		reason string
		method string
		path   string
		host   string
		want   int
	}{
		"PostToThePage":       {reason: "the page takes no form", method: http.MethodPost, path: "", want: http.StatusMethodNotAllowed},
		"PostToTheStream":     {reason: "the stream only sends", method: http.MethodPost, path: "events", want: http.StatusMethodNotAllowed},
		"PutAFragment":        {reason: "fragments are read-only", method: http.MethodPut, path: "fragment/state?machine=door&state=Open", want: http.StatusMethodNotAllowed},
		"PatchAnObject":       {reason: "objects are read-only", method: http.MethodPatch, path: "fragment/object?machine=door&namespace=x&name=y", want: http.StatusMethodNotAllowed},
		"DeleteAnUnknownPath": {reason: "405 comes before 404", method: http.MethodDelete, path: "no/such/path", want: http.StatusMethodNotAllowed},
		"OptionsOfThePage":    {reason: "no method but GET and HEAD", method: http.MethodOptions, path: "", want: http.StatusMethodNotAllowed},
		"GetThePage":          {reason: "reads are served", method: http.MethodGet, path: "", want: http.StatusOK},
		"HeadThePage":         {reason: "HEAD is a read", method: http.MethodHead, path: "", want: http.StatusOK},
		"GetTheScript":        {reason: "the page's script is built in", method: http.MethodGet, path: "static/app.js", want: http.StatusOK},
		"GetAnUnknownPath":    {reason: "an unknown path is not found", method: http.MethodGet, path: "no/such/path", want: http.StatusNotFound},
		"GetForAnotherHost":   {reason: "a name that resolves to loopback elsewhere is not served", method: http.MethodGet, path: "", host: "dashboard.example.com", want: http.StatusMisdirectedRequest},
		"GetForLocalhost":     {reason: "localhost is loopback", method: http.MethodGet, path: "", host: "localhost", want: http.StatusOK},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, s.url+tc.path, strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s\n%s /%s answered %d, want %d", tc.reason, tc.method, tc.path, resp.StatusCode, tc.want)
			}
			if tc.want == http.StatusMethodNotAllowed {
				if got := resp.Header.Get("Allow"); got != "GET, HEAD" {
					t.Errorf("%s /%s: Allow is %q, want %q", tc.method, tc.path, got, "GET, HEAD")
				}
			}
		})
	}
}

// The event stream sends the snapshot at once, and Serve ends the stream
// when it stops.
func TestTheStreamSendsTheSnapshotAtOnce(t *testing.T) {
	e := fsmtest.New(t)
	s := serve(t, e)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type is %q, want text/event-stream", ct)
	}
	var data string
	buf := make([]byte, 64<<10)
	for !strings.Contains(data, "\n\n") || !strings.Contains(data, "data: ") {
		n, err := resp.Body.Read(buf)
		data += string(buf[:n])
		if err != nil {
			t.Fatalf("the stream ended before a snapshot: %v; it sent %q", err, data)
		}
	}
	_, line, _ := strings.Cut(data, "data: ")
	line, _, _ = strings.Cut(line, "\n")
	var snap snapshot
	if err := json.Unmarshal([]byte(line), &snap); err != nil {
		t.Fatalf("the stream's data is not a snapshot: %v: %s", err, line)
	}
	if !strings.Contains(data, "event: snapshot\n") {
		t.Errorf("the stream sent no snapshot event: %q", data)
	}
	s.checkReadOnly(t)
}

func TestCountObjects(t *testing.T) {
	g := doors().Graph()
	object := func(state fsm.State, stalled bool) objectFixture {
		return objectFixture{state: state, stalled: stalled}
	}
	cases := map[string]struct {
		reason  string
		objects []objectFixture
		want    counts
	}{
		"Empty": {
			reason: "every state shows, with no object",
			want:   counts{States: map[string]stateCounts{"Closed": {}, "Open": {}, "Removed": {}}},
		},
		"PlacedPendingAndUnknown": {
			reason: "objects count in their state; without a state they are pending; in a state the graph lacks, unknown",
			objects: []objectFixture{
				object("Closed", false), object("Closed", true), object("Open", false),
				object("", false), object("Ajar", false),
			},
			want: counts{Objects: 5, Pending: 1, Unknown: 1,
				States: map[string]stateCounts{"Closed": {Objects: 2, Stalled: 1}, "Open": {Objects: 1}, "Removed": {}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := countObjects(g, fixtures(tc.objects))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\ncountObjects: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// On a graph at version 2, an object of version 1 in a state the graph
// lacks is not yet migrated; one of version 2 there is unknown.
func TestCountObjectsTellsTheObjectsNotYetMigrated(t *testing.T) {
	g := doors().Graph()
	g.Version = 2
	objects := fixtures([]objectFixture{{state: "Ajar"}, {state: "Ajar", version: 1}, {state: "Ajar", version: 2}, {state: "Closed", version: 1}})
	got := countObjects(g, objects)
	if got.Objects != 4 || got.Earlier != 2 || got.Unknown != 1 || got.States["Closed"].Objects != 1 {
		t.Errorf("countObjects = %+v, want 4 objects: 2 not yet migrated, 1 unknown, 1 in Closed", got)
	}
}

func TestShortDuration(t *testing.T) {
	cases := map[time.Duration]string{
		-time.Second:                       "0s",
		300 * time.Millisecond:             "<1s",
		45 * time.Second:                   "45s",
		3*time.Minute + 12*time.Second:     "3m12s",
		30 * time.Minute:                   "30m",
		2*time.Hour + 5*time.Minute:        "2h05m",
		5 * time.Hour:                      "5h",
		3*24*time.Hour + 4*time.Hour:       "3d4h",
		10 * 24 * time.Hour:                "10d",
		47*time.Hour + 59*time.Minute:      "47h59m",
		time.Minute + 500*time.Millisecond: "1m",
	}
	for d, want := range cases {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// A snapshot that a slow page has not read yet is replaced by the next:
// the page gets the latest, never a backlog, and the hub never blocks.
func TestHubKeepsOnlyTheLatestSnapshot(t *testing.T) {
	h := newHub()
	updates, unsubscribe := h.subscribe()
	for _, s := range []string{"1", "2", "3"} {
		h.publish([]byte(s))
	}
	if got := string(<-updates); got != "3" {
		t.Errorf("a page that read late got %q, want the latest, 3", got)
	}
	h.publish([]byte("3"))
	select {
	case got := <-updates:
		t.Errorf("an unchanged snapshot was sent again: %q", got)
	default:
	}
	late, unsubscribeLate := h.subscribe()
	if got := string(<-late); got != "3" {
		t.Errorf("a page that opened late got %q first, want the latest, 3", got)
	}
	unsubscribe()
	unsubscribeLate()
	h.close()
	if _, ok := <-updates; ok {
		t.Error("the channel of a page that left is still open")
	}
}

// Serve gives up its listener's errors rather than hang.
func TestServeReturnsTheListenersError(t *testing.T) {
	e := fsmtest.New(t)
	d, err := New(e.Config(), Options{ErrorLog: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	done := make(chan error, 1)
	go func() { done <- d.Serve(t.Context(), l) }()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Serve on a closed listener returned %v, want net.ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve on a closed listener did not return")
	}
}

// objectFixture is an object for countObjects.
type objectFixture struct {
	state   fsm.State
	stalled bool

	version int32
}

func fixtures(fs []objectFixture) []inspect.Object {
	var out []inspect.Object
	for i, f := range fs {
		o := inspect.Object{Name: fmt.Sprintf("door-%d", i)}
		o.Status.State, o.Status.GraphVersion = f.state, f.version
		if f.stalled {
			o.Status.Conditions = []metav1.Condition{{Type: fsm.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Stopped"}}
		}
		out = append(out, o)
	}
	return out
}
