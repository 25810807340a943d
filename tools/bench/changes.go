package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm"
	"github.com/kfsm/kfsm/internal/testapi/v1alpha1"
)

const (
	// lull is how long the controller must be quiet before each single
	// change and before the churn: long enough for the tail of what came
	// before (an event, a reconcile of its own status write) to be over.
	lull = 300 * time.Millisecond
	// churnWriters write the churn's changes, so that one slow write does
	// not hold up the pace.
	churnWriters = 4
)

// churnResult is what a stream of changes cost the controller.
type churnResult struct {
	changes     int
	rate, asked float64 // achieved and asked, per second
	// cpu is the controller's CPU seconds from before the first write
	// until it was quiet after the last change was Ready.
	cpu      float64
	requests map[string]int
}

// changes changes the spec of converged gadgets under the controller that
// converged them: single changes, one at a time and each timed, then a
// steady stream of them, whose cost it measures.
func (d *driver) changes(ctx context.Context, p *process, r run, ns string, res *result) error {
	if d.plan.changes == 0 && d.plan.churnFor == 0 {
		return nil
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	t, err := d.watchGenerations(watchCtx, ns)
	if err != nil {
		return err
	}
	// The gadgets were created with the targets 0 to n-1: each change
	// sets a target that none had, so that each is a new generation.
	var target atomic.Int32
	target.Store(int32(r.n))
	next := func() int32 { return target.Add(1) }
	if d.plan.changes > 0 {
		if res.latencies, res.writes, res.changed, err = d.singleChanges(ctx, p, t, ns, r.n, next); err != nil {
			return fmt.Errorf("single changes: %w", err)
		}
	}
	if d.plan.churnFor > 0 {
		if res.churn, err = d.churn(ctx, p, t, ns, r.n, next); err != nil {
			return fmt.Errorf("churn: %w", err)
		}
	}
	return nil
}

// singleChanges changes one gadget at a time, on gadgets spread evenly
// over the n, each once the controller has been quiet for a lull, and
// times each from the write until the watch sees the gadget Ready at its
// new generation; it also records how long each write took to be
// answered, and the names of the gadgets changed.
func (d *driver) singleChanges(ctx context.Context, p *process, t *readiness, ns string, n int, next func() int32) (latencies, writes []time.Duration, names []string, err error) {
	for i := range d.plan.changes {
		if _, err := p.settleFor(ctx, 0, lull, d.plan.timeout); err != nil {
			return nil, nil, nil, err
		}
		name := gadgetName(i * n / d.plan.changes)
		names = append(names, name)
		start := time.Now()
		gen, err := d.retarget(ctx, ns, name, next())
		if err != nil {
			return nil, nil, nil, err
		}
		writes = append(writes, time.Since(start))
		if err := d.awaitGenerations(ctx, p, t, map[string]int64{name: gen}); err != nil {
			return nil, nil, nil, fmt.Errorf("waiting for %s to be Ready at generation %d: %w", name, gen, err)
		}
		latencies = append(latencies, t.at(name).Sub(start))
	}
	return latencies, writes, names, nil
}

// churn changes gadgets round-robin over the n, one change at each tick
// of a ticker at the asked rate, until rate × duration changes are
// written, then waits until each changed gadget is Ready at its newest
// generation and the controller is quiet. Writers that fall behind make
// the ticker drop ticks, and the achieved rate lower.
func (d *driver) churn(ctx context.Context, p *process, t *readiness, ns string, n int, next func() int32) (churnResult, error) {
	before, err := p.settleFor(ctx, 0, lull, d.plan.timeout)
	if err != nil {
		return churnResult{}, err
	}
	total := d.plan.churnTotal()
	writeCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	names := make(chan string)
	var mu sync.Mutex
	newest := map[string]int64{}
	var wg sync.WaitGroup
	for range churnWriters {
		wg.Go(func() {
			for name := range names {
				gen, err := d.retarget(writeCtx, ns, name, next())
				if err != nil {
					cancel(err)
					continue
				}
				mu.Lock()
				newest[name] = max(newest[name], gen)
				mu.Unlock()
			}
		})
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / d.plan.churnRate))
	start := time.Now()
feed:
	for i := range total {
		select {
		case <-tick.C:
		case <-writeCtx.Done():
			break feed
		}
		select {
		case names <- gadgetName(i % n):
		case <-writeCtx.Done():
			break feed
		}
	}
	tick.Stop()
	close(names)
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(writeCtx); err != nil {
		return churnResult{}, err
	}
	if err := d.awaitGenerations(ctx, p, t, newest); err != nil {
		return churnResult{}, fmt.Errorf("waiting for the changed gadgets to be Ready: %w", err)
	}
	after, err := p.settle(ctx, 0, d.plan.timeout)
	if err != nil {
		return churnResult{}, err
	}
	return churnResult{
		changes:  total,
		rate:     float64(total) / elapsed.Seconds(),
		asked:    d.plan.churnRate,
		cpu:      after.CPU - before.CPU,
		requests: subtract(after.Requests, before.Requests),
	}, nil
}

// churnTotal is the number of changes that the churn writes.
func (p *plan) churnTotal() int { return int(p.churnRate * p.churnFor.Seconds()) }

// retarget sets a gadget's spec.target by a merge patch, as a user's edit
// does, and returns the gadget's new generation.
func (d *driver) retarget(ctx context.Context, ns, name string, target int32) (int64, error) {
	g := &v1alpha1.Gadget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"target":%d}}`, target))
	if err := d.client.Patch(ctx, g, patch); err != nil {
		return 0, fmt.Errorf("changing gadget %s: %w", name, err)
	}
	return g.Generation, nil
}

// awaitGenerations waits until every gadget of want has been seen Ready
// at its generation there or a newer one, while watching the controller.
func (d *driver) awaitGenerations(ctx context.Context, p *process, t *readiness, want map[string]int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return p.await(ctx, t.await(ctx, want), d.plan.timeout)
}

// readiness follows a namespace's gadgets through a watch and records,
// for each, the newest generation at which it was seen Ready and when the
// watch first showed it so.
type readiness struct {
	mu    sync.Mutex
	ready map[string]readyAt
	// changed is closed, and replaced, each time a gadget is seen Ready
	// at a newer generation.
	changed chan struct{}
	ended   chan struct{} // closed when the watch ends, with err
	err     error
}

type readyAt struct {
	generation int64
	at         time.Time
}

// watchGenerations opens a watch of the namespace's gadgets from now on
// and follows them until ctx ends. It starts at the version of a list,
// not with the gadgets as they are: the API server would send all of them
// first, and the first change's news would wait behind them in the
// driver's own watch, at 10,000 gadgets for most of a second.
func (d *driver) watchGenerations(ctx context.Context, ns string) (*readiness, error) {
	var list v1alpha1.GadgetList
	if err := d.client.List(ctx, &list, client.InNamespace(ns), client.Limit(1)); err != nil {
		return nil, fmt.Errorf("listing the gadgets: %w", err)
	}
	w, err := d.client.Watch(ctx, &v1alpha1.GadgetList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return nil, fmt.Errorf("watching the gadgets: %w", err)
	}
	t := &readiness{ready: map[string]readyAt{}, changed: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		t.err = d.followGadgets(ctx, w, ns, list.ResourceVersion, t.seen)
		close(t.ended)
	}()
	return t, nil
}

// seen records g if it is Ready at its generation: Ready, with the
// status's observedGeneration and the Ready condition's both at the
// gadget's generation.
func (t *readiness) seen(g *v1alpha1.Gadget, deleted bool) bool {
	now := time.Now()
	c := meta.FindStatusCondition(g.Status.Conditions, fsm.ConditionReady)
	if deleted || c == nil || c.Status != metav1.ConditionTrue ||
		c.ObservedGeneration != g.Generation || g.Status.ObservedGeneration != g.Generation {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if g.Generation <= t.ready[g.Name].generation {
		return false
	}
	t.ready[g.Name] = readyAt{generation: g.Generation, at: now}
	close(t.changed)
	t.changed = make(chan struct{})
	return false
}

// await returns a channel that says when every gadget of want has been
// seen Ready at its generation there or a newer one, or why that cannot be
// known.
func (t *readiness) await(ctx context.Context, want map[string]int64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- t.wait(ctx, maps.Clone(want)) }()
	return done
}

func (t *readiness) wait(ctx context.Context, left map[string]int64) error {
	for {
		t.mu.Lock()
		for name, gen := range left {
			if t.ready[name].generation >= gen {
				delete(left, name)
			}
		}
		changed := t.changed
		t.mu.Unlock()
		if len(left) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-t.ended:
			return errors.Join(errors.New("the watch of the gadgets ended"), t.err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// at returns when the watch first saw the gadget Ready at its newest
// generation.
func (t *readiness) at(name string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ready[name].at
}

// nearestRank is the p-th percentile of the durations by the nearest-rank
// method: the smallest that at least p percent of them do not exceed,
// and its rank, from 1.
func nearestRank(d []time.Duration, p float64) (time.Duration, int) {
	s := slices.Sorted(slices.Values(d))
	rank := max(int(math.Ceil(p/100*float64(len(s)))), 1)
	return s[rank-1], rank
}
