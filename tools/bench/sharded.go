package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/fsm/sharding"
)

// sharded says whether the plan measures sharded kfsm replicas.
func (p *plan) sharded() bool { return len(p.replicas) > 0 }

// shardedResult is what a sharded run measured, when all were Ready.
type shardedResult struct {
	run
	ready     time.Duration
	processes []replicaResult
	handover  handoverResult // with more than one replica
}

// replicaResult is one replica's part in a sharded run.
type replicaResult struct {
	identity string
	report   report
	slots    int // listed in its Lease, of sharding.NumSlots
}

// cpu returns the replicas' CPU seconds, summed, and the most of one.
func (r shardedResult) cpu() (total, most float64) {
	for _, rep := range r.processes {
		total += rep.report.CPU
		most = max(most, rep.report.CPU)
	}
	return total, most
}

// rss returns the largest peak RSS of a replica, in bytes.
func (r shardedResult) rss() int64 {
	var most int64
	for _, rep := range r.processes {
		most = max(most, rep.report.MaxRSS)
	}
	return most
}

// decoded returns the mean over the replicas of the distinct Gadgets
// that each one's cache decoded, as a fraction of n.
func (r shardedResult) decoded() float64 {
	sum := 0
	for _, rep := range r.processes {
		sum += rep.report.Gadgets
	}
	return float64(sum) / float64(len(r.processes)) / float64(r.n)
}

// runSharded measures sharded kfsm: for each setting, rounds that each
// run every number of replicas in turn.
func (d *driver) runSharded(ctx context.Context) error {
	var results []shardedResult
	for _, n := range d.plan.sizes {
		for _, w := range d.plan.workers {
			for round := 1; round <= d.plan.rounds; round++ {
				for i, replicas := range d.plan.replicas {
					last := d.plan.final(n, w, round) && i == len(d.plan.replicas)-1
					r := run{impl: "kfsm", n: n, workers: w, round: round, replicas: replicas, last: last}
					res, err := d.measureSharded(ctx, r)
					if measured(err) {
						printSharded(d.out, res)
					}
					if err != nil {
						return fmt.Errorf("%s: %w", r.name(), err)
					}
					results = append(results, res)
				}
			}
			summarizeSharded(d.out, results, n, w)
		}
	}
	return nil
}

// measureSharded starts the run's replicas at once over n new gadgets and
// waits until all are Ready, then reads the replicas' reports and Leases
// and stops them.
func (d *driver) measureSharded(ctx context.Context, r run) (res shardedResult, err error) {
	res.run = r
	ns := r.name()
	var created time.Duration
	err = d.withGadgets(ctx, ns, r.n, r.workers*r.replicas, r.last, &created, func() error {
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		ready, err := d.watchReady(watchCtx, ns, r.n)
		if err != nil {
			return err
		}
		start := time.Now()
		ps := make([]*process, 0, r.replicas)
		var walks []string
		defer func() {
			for _, p := range ps {
				p.kill()
			}
		}()
		for i := range r.replicas {
			args := d.controllerArgs(r, ns, fmt.Sprintf("-replica-%d", i+1))
			args.shard = fmt.Sprintf("replica-%d", i+1)
			args.walks = strings.TrimSuffix(args.log, ".log") + ".walks"
			walks = append(walks, args.walks)
			p, err := d.startController(ctx, args)
			if err != nil {
				return err
			}
			ps = append(ps, p)
			res.processes = append(res.processes, replicaResult{identity: args.shard})
		}
		if err := awaitAll(ctx, ps, ready, d.plan.timeout); err != nil {
			return fmt.Errorf("waiting for all to be Ready: %w", err)
		}
		res.ready = time.Since(start)
		for i, p := range ps {
			if res.processes[i].report, err = p.report(); err != nil {
				return fmt.Errorf("%s: %w", res.processes[i].identity, err)
			}
		}
		if err := d.readSlots(ctx, ns, res.processes); err != nil {
			return err
		}
		if len(ps) < 2 {
			return stopAll(ps)
		}
		if res.handover, err = d.handOver(ctx, ps, walks); err != nil {
			return fmt.Errorf("the hand-over: %w", err)
		}
		return stopAll(ps[:len(ps)-1])
	})
	return res, err
}

// readSlots reads from the replicas' Leases how many slots each holds.
func (d *driver) readSlots(ctx context.Context, ns string, replicas []replicaResult) error {
	var leases coordinationv1.LeaseList
	if err := d.client.List(ctx, &leases, client.InNamespace(ns), client.MatchingLabels{sharding.LabelShards: "bench"}); err != nil {
		return fmt.Errorf("listing the replicas' Leases: %w", err)
	}
	for _, l := range leases.Items {
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		if i := slices.IndexFunc(replicas, func(r replicaResult) bool { return r.identity == holder }); i >= 0 {
			replicas[i].slots = countSlots(l.Annotations[sharding.AnnotationSlots])
		}
	}
	return nil
}

// countSlots counts the slots of a Lease's list, such as "0-20,42"; a
// part it cannot read counts none.
func countSlots(list string) int {
	n := 0
	for part := range strings.SplitSeq(list, ",") {
		from, to, isRange := strings.Cut(part, "-")
		if !isRange {
			to = from
		}
		a, errA := strconv.Atoi(from)
		b, errB := strconv.Atoi(to)
		if errA == nil && errB == nil && b >= a {
			n += b - a + 1
		}
	}
	return n
}

// printSharded prints a sharded run as it finishes, with a line per
// replica.
func printSharded(out io.Writer, r shardedResult) {
	total, most := r.cpu()
	fmt.Fprintf(out, "sharded kfsm R=%d n=%d workers=%d round %d: Ready in %.2f s, CPU %.2f s in all (%.2f ms/object), %.2f s the most of one, peak RSS %.0f MiB the most of one\n",
		len(r.processes), r.n, r.workers, r.round, r.ready.Seconds(), total, msPerObject(total, r.n), most, mebibytes(r.rss()))
	for _, rep := range r.processes {
		fmt.Fprintf(out, "    %s: CPU %.2f s, peak RSS %.0f MiB, %d slots; %d reconciles (%d failed); decoded %d Gadgets (%.2f of N), %.2f times each\n",
			rep.identity, rep.report.CPU, mebibytes(rep.report.MaxRSS), rep.slots, rep.report.Reconciles, rep.report.Errors,
			rep.report.Gadgets, float64(rep.report.Gadgets)/float64(r.n), float64(rep.report.Decodes)/float64(max(rep.report.Gadgets, 1)))
	}
	if len(r.processes) > 1 {
		fmt.Fprintf(out, "    balance, least–most of a replica's share: Gadgets %s, CPU %s, peak RSS %s\n",
			r.balance(func(rep replicaResult) float64 { return float64(rep.report.Gadgets) }),
			r.balance(func(rep replicaResult) float64 { return rep.report.CPU }),
			r.balance(func(rep replicaResult) float64 { return float64(rep.report.MaxRSS) }))
	}
	printHandover(out, r.handover)
}

// balance says how far the replicas' values are from an equal share of
// their sum, as the least and the most of value over the share.
func (r shardedResult) balance(value func(replicaResult) float64) string {
	var sum, least, most float64
	for i, rep := range r.processes {
		v := value(rep)
		sum += v
		if i == 0 || v < least {
			least = v
		}
		most = max(most, v)
	}
	share := sum / float64(len(r.processes))
	if share == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f–%.2f", least/share, most/share)
}

// summarizeSharded prints the medians and spreads of one setting by
// number of replicas, and their ratios to one replica.
func summarizeSharded(out io.Writer, all []shardedResult, n, workers int) {
	byReplicas := map[int][]shardedResult{}
	var counts []int
	for _, r := range all {
		if r.n != n || r.workers != workers {
			continue
		}
		if _, ok := byReplicas[r.replicas]; !ok {
			counts = append(counts, r.replicas)
		}
		byReplicas[r.replicas] = append(byReplicas[r.replicas], r)
	}
	slices.Sort(counts)
	fmt.Fprintf(out, "\n== sharded kfsm, N=%d, workers=%d per replica: median [min–max] of %d rounds\n", n, workers, len(byReplicas[counts[0]]))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "replicas\ttime to Ready (s)\tCPU, all (s)\tCPU, most of one (s)\tpeak RSS, most of one (MiB)\tGadgets decoded per replica (of N)")
	medians := map[int][5]float64{}
	for _, c := range counts {
		var f [5][]float64 // time, CPU, the most CPU, RSS, decoded
		for _, r := range byReplicas[c] {
			total, most := r.cpu()
			f[0] = append(f[0], r.ready.Seconds())
			f[1] = append(f[1], total)
			f[2] = append(f[2], most)
			f[3] = append(f[3], mebibytes(r.rss()))
			f[4] = append(f[4], r.decoded())
		}
		var m [5]float64
		for i := range f {
			m[i] = median(f[i])
		}
		medians[c] = m
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", c, spread(f[0]), spread(f[1]), spread(f[2]), spread(f[3]), spread(f[4]))
	}
	if one, ok := medians[1]; ok {
		for _, c := range counts {
			if c == 1 {
				continue
			}
			m := medians[c]
			fmt.Fprintf(tw, "%d/1\t%s\t%s\t%s\t%s\t%s\n", c, ratio(m[0], one[0]), ratio(m[1], one[1]), ratio(m[2], one[2]), ratio(m[3], one[3]), ratio(m[4], one[4]))
		}
	}
	_ = tw.Flush()
	summarizeHandovers(out, byReplicas, counts)
	fmt.Fprintln(out)
}

// summarizeHandovers prints, by number of replicas, the medians and
// spreads of the hand-overs when one replica was killed.
func summarizeHandovers(out io.Writer, byReplicas map[int][]shardedResult, counts []int) {
	for _, c := range counts {
		var last, p50, writes, reads []float64
		overlaps, missing := 0, 0
		for _, r := range byReplicas[c] {
			h := r.handover
			if h.moved == 0 {
				continue
			}
			last = append(last, h.last().Seconds())
			p50 = append(p50, h.p50().Seconds())
			writes = append(writes, float64(total(h.writes))/float64(h.moved))
			reads = append(reads, float64(total(h.reads))/float64(h.moved))
			overlaps += h.overlaps
			missing += h.missing
		}
		if len(last) == 0 {
			continue
		}
		fmt.Fprintf(out, "hand-over of %d replicas, one killed: its Gadgets reconciled again within %s s (p50 %s s); per Gadget moved, Leases aside, writes %s and reads %s; %d not reconciled again, %d reconciled by two replicas at once, in all rounds\n",
			c, spread(last), spread(p50), spread(writes), spread(reads), missing, overlaps)
	}
}
