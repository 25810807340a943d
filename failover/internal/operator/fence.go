package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fence keeps a leader that may have lost its Lease from writing.
//
// client-go's leader election does not fence: a leader learns that it
// lost the Lease only when a renewal fails, up to RenewDeadline after it
// tries, and meanwhile its controllers go on writing. A process that was
// frozen (SIGSTOP, a long pause of the machine) longer than LeaseDuration
// wakes up still believing it leads, while another process already does.
//
// The fence closes that gap with time alone. A standby takes the Lease
// only once LeaseDuration has passed since it saw the Lease change, and it
// cannot see a renewal before the leader sent it. So the leader holds the
// Lease until at least LeaseDuration after it sent its last successful
// renewal. The fence lets writes through for RenewDeadline after that
// moment, the time the elector itself allows, and refuses them after; a
// write has the rest, LeaseDuration minus RenewDeadline, to reach the API
// server. Both processes measure on the same monotonic clock.
type fence struct {
	window time.Duration

	mu      sync.Mutex
	renewed time.Time // when the latest successful acquisition or renewal was sent; zero when not held
}

// open tells whether a write may go now.
func (f *fence) open() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.renewed.IsZero() && time.Since(f.renewed) < f.window
}

func (f *fence) hold(sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed = sent
}

func (f *fence) release() { f.hold(time.Time{}) }

// transport refuses writes while the fence is closed.
func (f *fence) transport(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if !f.open() {
				if req.Body != nil {
					_ = req.Body.Close()
				}
				return nil, fmt.Errorf("%s %s refused: the Lease may have moved to another process", req.Method, req.URL.Path)
			}
		}
		return next.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// fencedLock is the Lease lock that tells the fence when the Lease was
// acquired, renewed and released.
//
// It also refuses a release once the fence is closed: client-go releases
// with the resourceVersion it has just read, so a leader that lost the
// Lease without noticing would otherwise empty its successor's Lease.
type fencedLock struct {
	lock  resourcelock.Interface
	fence *fence
}

var _ resourcelock.Interface = (*fencedLock)(nil)

func (l *fencedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return l.lock.Get(ctx)
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.lock.Create(ctx, r)
	if err == nil && r.HolderIdentity == l.Identity() {
		l.fence.hold(sent)
	}
	return err
}

func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if r.HolderIdentity == "" {
		if !l.fence.open() {
			return errors.New("not releasing the Lease: it may have moved to another process")
		}
		err := l.lock.Update(ctx, r)
		if err == nil {
			l.fence.release()
		}
		return err
	}
	sent := time.Now()
	err := l.lock.Update(ctx, r)
	if err == nil && r.HolderIdentity == l.Identity() {
		l.fence.hold(sent)
	}
	return err
}

func (l *fencedLock) RecordEvent(s string) { l.lock.RecordEvent(s) }
func (l *fencedLock) Identity() string     { return l.lock.Identity() }
func (l *fencedLock) Describe() string     { return l.lock.Describe() }
