package fsm

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestAfterDoublesUpToFiveMinutes(t *testing.T) {
	for failures, want := range map[int32]time.Duration{
		0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		9: 256 * time.Second, 10: 5 * time.Minute, 1000: 5 * time.Minute,
	} {
		if got := backoffAfter(failures); got != want {
			t.Errorf("backoffAfter(%d) = %v, want %v", failures, got, want)
		}
	}
}

func TestTheBackoffTimesOneRequeueAndTheInnerLimiterTheRest(t *testing.T) {
	inner := workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, time.Second)
	l := &requeueLimiter{TypedRateLimiter: inner, due: map[reconcile.Request]time.Duration{}}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "o"}}
	l.RetryIn(req, 42*time.Second)
	if got := l.When(req); got != 42*time.Second {
		t.Errorf("the requeue after a failure waits %v, want kfsm's backoff of 42s", got)
	}
	if got := l.When(req); got != 5*time.Millisecond {
		t.Errorf("the next requeue waits %v, want the inner limiter's first delay of 5ms", got)
	}
}
