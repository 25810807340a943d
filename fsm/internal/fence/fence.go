// Package fence keeps a process from writing to the API server once it
// may no longer hold a Lease: a leader election's (package fsm's
// FenceLeaderElection) or a shard replica's. A Fence is told when the
// process last renewed the Lease, and its transport refuses writes, and
// cuts off those in flight, once its window (the Lease's RenewDeadline)
// has passed since.
package fence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// LeaderElection is fsm.FenceLeaderElection: it changes cfg and opts so
// that the manager they make fences the writes of its leader election.
func LeaderElection(cfg *rest.Config, opts *manager.Options, identity string) error {
	switch {
	case !opts.LeaderElection:
		return errors.New("fsm: fencing leader election: the options do not ask for leader election")
	case opts.LeaderElectionID == "" || opts.LeaderElectionNamespace == "":
		return errors.New("fsm: fencing leader election: LeaderElectionID and LeaderElectionNamespace must be set")
	case opts.LeaderElectionResourceLockInterface != nil:
		return errors.New("fsm: fencing leader election: the options have a resource lock already")
	case opts.LeaderElectionResourceLock != "" && opts.LeaderElectionResourceLock != resourcelock.LeasesResourceLock:
		return fmt.Errorf("fsm: fencing leader election: resource lock %q; only %q is fenced", opts.LeaderElectionResourceLock, resourcelock.LeasesResourceLock)
	}
	// Unset, they are controller-runtime's defaults.
	leaseDuration := ptr.Deref(opts.LeaseDuration, 15*time.Second)
	renewDeadline := ptr.Deref(opts.RenewDeadline, 10*time.Second)
	if renewDeadline >= leaseDuration {
		return fmt.Errorf("fsm: fencing leader election: RenewDeadline %v must be shorter than LeaseDuration %v", renewDeadline, leaseDuration)
	}
	if identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("fsm: fencing leader election: %w", err)
		}
		identity = host + "_" + string(uuid.NewUUID())
	}
	// The lock's client writes without the fence: the Lease protects
	// itself with its resourceVersion, and the fence learns from it.
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.Timeout = max(renewDeadline/2, time.Second) // as controller-runtime sets it
	leaseClient, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		return fmt.Errorf("fsm: fencing leader election: %w", err)
	}
	f := New(renewDeadline, "the leader election Lease", false)
	opts.LeaderElectionResourceLockInterface = &lock{fence: f, lock: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaderElectionNamespace, Name: opts.LeaderElectionID},
		Client:     leaseClient.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}}
	cfg.Wrap(f.Transport)
	return nil
}

// Fence tells whether the process may write: for window after it sent
// its latest successful acquisition or renewal of the Lease.
type Fence struct {
	window time.Duration
	lease  string // which Lease, for the refusal
	// first, when set, is closed once the Lease was first held: a write
	// made before waits for it, up to window, rather than being refused
	// while the process starts.
	first chan struct{}

	mu      sync.Mutex
	renewed time.Time // zero when the Lease is not held
	held    bool      // it has been, once
}

// New returns a fence that is closed until Hold opens it. lease names the
// Lease, for the refusals. With waitFirst, a write made before the Lease
// was first held waits for it, up to window, rather than being refused
// while the process starts.
func New(window time.Duration, lease string, waitFirst bool) *Fence {
	f := &Fence{window: window, lease: lease}
	if waitFirst {
		f.first = make(chan struct{})
	}
	return f
}

// Open reports whether the process may write now.
func (f *Fence) Open() bool {
	_, ok := f.until()
	return ok
}

// until returns when the fence closes, and whether it is open now.
func (f *Fence) until() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.renewed.Add(f.window)
	return end, !f.renewed.IsZero() && time.Now().Before(end)
}

// Hold opens the fence for window after sent, when the process sent the
// renewal of the Lease that succeeded; a zero sent closes it.
func (f *Fence) Hold(sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed = sent
	if !sent.IsZero() && !f.held {
		f.held = true
		if f.first != nil {
			close(f.first)
		}
	}
}

// started waits, if the fence waits for the first hold, until then, the
// request's end or window.
func (f *Fence) started(req *http.Request) {
	if f.first == nil {
		return
	}
	select {
	case <-f.first:
	case <-req.Context().Done():
	case <-time.After(f.window):
	}
}

// Transport refuses writes while the fence is closed, and ends those it
// let through when it closes: a write that hangs (on a partition, say)
// must not outlive the fence, nor keep the handler that waits for it
// running beside the next holder's.
func (f *Fence) Transport(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		switch {
		case req.Method == http.MethodGet, req.Method == http.MethodHead, req.Method == http.MethodOptions, review(req):
			return next.RoundTrip(req)
		}
		f.started(req)
		end, ok := f.until()
		if !ok {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, fmt.Errorf("%s %s refused: this process may no longer hold %s", req.Method, req.URL.Path, f.lease)
		}
		ctx, cancel := context.WithDeadline(req.Context(), end)
		cut := func(err error) error {
			if ctx.Err() != nil && req.Context().Err() == nil {
				return fmt.Errorf("%s %s cut off: this process may no longer hold %s: %w", req.Method, req.URL.Path, f.lease, err)
			}
			return err
		}
		resp, err := next.RoundTrip(req.WithContext(ctx))
		if err != nil {
			cancel()
			return nil, cut(err)
		}
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel, cut: cut}
		return resp, nil
	})
}

// review reports whether req asks a question of the API server that
// changes nothing: a TokenReview, a SelfSubjectReview or an access
// review, the only resources of the authentication and authorization
// groups. Such a request is created, but nothing is stored, so the fence
// lets it through: a webhook served by a replica that does not lead
// learns the operator's identity with one.
func review(req *http.Request) bool {
	return req.Method == http.MethodPost &&
		(strings.HasPrefix(req.URL.Path, "/apis/authentication.k8s.io/") || strings.HasPrefix(req.URL.Path, "/apis/authorization.k8s.io/"))
}

// cancelOnClose is a response body that ends its request's context when
// it is closed; a read that the fence's end cuts short says so.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
	cut    func(error) error
}

func (b *cancelOnClose) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = b.cut(err)
	}
	return n, err
}

func (b *cancelOnClose) Close() error {
	defer b.cancel()
	return b.ReadCloser.Close()
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// lock is the Lease lock that tells the fence when the Lease was
// acquired, renewed and released.
type lock struct {
	lock  resourcelock.Interface
	fence *Fence
}

var _ resourcelock.Interface = (*lock)(nil)

func (l *lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return l.lock.Get(ctx)
}

func (l *lock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(r, func() error { return l.lock.Create(ctx, r) })
}

func (l *lock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if r.HolderIdentity == "" && !l.fence.Open() {
		// client-go releases with the resourceVersion it has just read.
		return errors.New("not releasing the Lease: it may have moved to another process")
	}
	return l.write(r, func() error { return l.lock.Update(ctx, r) })
}

// write writes the Lease record r and tells the fence.
func (l *lock) write(r resourcelock.LeaderElectionRecord, do func() error) error {
	sent := time.Now()
	if err := do(); err != nil {
		return err
	}
	switch r.HolderIdentity {
	case l.Identity():
		l.fence.Hold(sent)
	case "":
		l.fence.Hold(time.Time{})
	}
	return nil
}

func (l *lock) RecordEvent(s string) { l.lock.RecordEvent(s) }
func (l *lock) Identity() string     { return l.lock.Identity() }
func (l *lock) Describe() string     { return l.lock.Describe() }
