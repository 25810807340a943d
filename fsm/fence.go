package fsm

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
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// FenceLeaderElection makes a manager's leader election fence its
// writes: the process writes to the API server only while it knows that
// it holds the Lease, so that a leader frozen past its Lease (a paused
// VM, a long garbage collection, a partition) writes nothing once it
// wakes, while another process leads.
//
// controller-runtime's leader election (client-go's) does not fence: a
// leader learns that it lost the Lease only when a renewal fails, up to
// RenewDeadline after it tries, and meanwhile its controllers go on
// writing. The fence closes that gap with time alone. A standby takes the
// Lease only once LeaseDuration has passed since it saw the Lease change,
// and it cannot see a renewal before the leader sent it, so the leader
// holds the Lease for at least LeaseDuration after it sent its last
// successful renewal. The fence lets writes through for RenewDeadline
// after that moment, the time the elector itself allows, refuses them
// after, and then cuts off those it let through that are still waiting
// for their answer (on a partition, say), so that no handler waits on a
// write beside the next leader's; a write has the rest, LeaseDuration
// minus RenewDeadline, to reach the API server. It also refuses to
// release a Lease that may have moved, which client-go would otherwise
// empty under its new holder.
//
// Call it before manager.New with the configuration and the options that
// the manager gets: it changes both. identity names the process in the
// Lease; empty means the host name and a UUID, as controller-runtime
// names it. opts must ask for leader election with a LeaderElectionID and
// a LeaderElectionNamespace, and the Lease resource lock (the default).
// Reads are never refused, nor reviews (a SelfSubjectReview, an access
// review), which store nothing; a refused write fails with an error that
// says why, and the reconcile is retried once the process leads again.
// The fence assumes that the clocks of leader and standby advance at the
// same rate, and a write it lets through may still be delayed past
// LeaseDuration by a freeze between the check and the API server, or by
// a network that delivers it late: only a precondition checked by the
// API server could exclude that.
func FenceLeaderElection(cfg *rest.Config, opts *manager.Options, identity string) error {
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
	leaseDuration, renewDeadline := 15*time.Second, 10*time.Second // controller-runtime's defaults
	if opts.LeaseDuration != nil {
		leaseDuration = *opts.LeaseDuration
	}
	if opts.RenewDeadline != nil {
		renewDeadline = *opts.RenewDeadline
	}
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
	f := &fence{window: renewDeadline, lease: "the leader election Lease"}
	opts.LeaderElectionResourceLockInterface = &fencedLock{fence: f, lock: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.LeaderElectionNamespace, Name: opts.LeaderElectionID},
		Client:     leaseClient.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}}
	cfg.Wrap(f.transport)
	return nil
}

// fence tells whether the process may write: for window after it sent
// its latest successful acquisition or renewal of the Lease.
type fence struct {
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

func (f *fence) open() bool {
	_, ok := f.until()
	return ok
}

// until returns when the fence closes, and whether it is open now.
func (f *fence) until() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := f.renewed.Add(f.window)
	return end, !f.renewed.IsZero() && time.Now().Before(end)
}

func (f *fence) hold(sent time.Time) {
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
func (f *fence) started(req *http.Request) {
	if f.first == nil {
		return
	}
	select {
	case <-f.first:
	case <-req.Context().Done():
	case <-time.After(f.window):
	}
}

// transport refuses writes while the fence is closed, and ends those it
// let through when it closes: a write that hangs (on a partition, say)
// must not outlive the fence, nor keep the handler that waits for it
// running beside the next holder's.
func (f *fence) transport(next http.RoundTripper) http.RoundTripper {
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

// fencedLock is the Lease lock that tells the fence when the Lease was
// acquired, renewed and released.
type fencedLock struct {
	lock  resourcelock.Interface
	fence *fence
}

var _ resourcelock.Interface = (*fencedLock)(nil)

func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return l.lock.Get(ctx)
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(r, func() error { return l.lock.Create(ctx, r) })
}

func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if r.HolderIdentity == "" && !l.fence.open() {
		// client-go releases with the resourceVersion it has just read.
		return errors.New("not releasing the Lease: it may have moved to another process")
	}
	return l.write(r, func() error { return l.lock.Update(ctx, r) })
}

// write writes the Lease record r and tells the fence.
func (l *fencedLock) write(r resourcelock.LeaderElectionRecord, do func() error) error {
	sent := time.Now()
	if err := do(); err != nil {
		return err
	}
	switch r.HolderIdentity {
	case l.Identity():
		l.fence.hold(sent)
	case "":
		l.fence.hold(time.Time{})
	}
	return nil
}

func (l *fencedLock) RecordEvent(s string) { l.lock.RecordEvent(s) }
func (l *fencedLock) Identity() string     { return l.lock.Identity() }
func (l *fencedLock) Describe() string     { return l.lock.Describe() }
