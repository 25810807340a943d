package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kfsm/kfsm/cluster"
)

// describeMachine prints what the figures were measured on.
func (d *driver) describeMachine() error {
	v, err := d.discovery.ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the API server's version: %w", err)
	}
	fmt.Fprintf(d.out, "machine: %s, %d CPUs, GOMAXPROCS %d, %s memory; %s; kube-apiserver %s, built from k8s.io/kubernetes %s\n",
		procField("/proc/cpuinfo", "model name"), runtime.NumCPU(), runtime.GOMAXPROCS(0),
		memory(procField("/proc/meminfo", "MemTotal")), runtime.Version(), v.GitVersion, cluster.KubernetesVersion())
	if d.plan.sharded() {
		cpus := runtime.NumCPU()
		fmt.Fprintf(d.out, "caveat: the replicas, the API server and etcd share these %d CPUs: with %d cores, throughput cannot scale beyond %d processes\n\n", cpus, cpus, cpus)
		return nil
	}
	fmt.Fprintf(d.out, "requests are per object unless said; converge counts until all are Ready and the controller is quiet for %s\n\n", quiet)
	return nil
}

// procField reads the first "key: value" line of a /proc file.
func procField(path, key string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// memory turns /proc/meminfo's "24684084 kB" into GiB.
func memory(total string) string {
	kb, err := strconv.ParseFloat(strings.TrimSuffix(total, " kB"), 64)
	if err != nil {
		return total
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}

// printResult prints a run as it finishes: its figures, its requests by
// phase, and the check of the controller's count against the API
// server's.
func printResult(out io.Writer, r result) {
	fmt.Fprintf(out, "%s n=%d workers=%d round %d: Ready in %.2f s after %d reconciles, CPU %.2f s (%.2f ms/object; start-up %.2f s, then %.2f ms/object), peak RSS %.0f MiB; live heap once quiet %.1f MiB\n",
		r.impl, r.n, r.workers, r.round, r.ready.Seconds(), r.readyReconciles, r.cpu, msPerObject(r.cpu, r.n),
		r.startUp, msPerObject(r.cpu-r.startUp, r.n), mebibytes(r.rss), mebibytes(r.heap))
	objects, process := split(r.restart)
	fmt.Fprintf(out, "    converge (%d reconciles, %d failed): %s\n    resync: %s\n    restart: %s; per process: %s\n",
		r.reconciles, r.failed, perObject(r.converge, r.n), perObject(r.resync, r.n), perObject(objects, r.n), counts(process))
	fmt.Fprintf(out, "    API server, converge (controller/server): %s\n", agreement(ofWorkload(r.converge), r.server))
	fmt.Fprintf(out, "    API server's floor: it created the %d gadgets at %.0f/s, at which the controller's writes to converge take %.2f s; Ready took %.2f× that\n",
		r.n, float64(r.n)/r.created.Seconds(), floor(r).Seconds(), r.ready.Seconds()/floor(r).Seconds())
	if len(r.latencies) > 0 {
		p50, _ := nearestRank(r.latencies, 50)
		p99, rank := nearestRank(r.latencies, 99)
		slowest := slices.Index(r.latencies, slices.Max(r.latencies))
		fmt.Fprintf(out, "    single changes (%d, one at a time), from the write until Ready at the new generation: p50 %.1f ms, p99 %.1f ms (by nearest rank, %s), max %.1f ms (%s, change %d), of which its write %.1f ms\n",
			len(r.latencies), milliseconds(p50), milliseconds(p99), rankOf(rank, len(r.latencies)), milliseconds(r.latencies[slowest]), r.changed[slowest], slowest+1, milliseconds(r.writes[slowest]))
	}
	if c := r.churn; c.changes > 0 {
		fmt.Fprintf(out, "    churn (%d changes at %.1f/s, %g/s asked): CPU %.2f s, %.2f ms/change; per change: %s\n",
			c.changes, c.rate, c.asked, c.cpu, msPerObject(c.cpu, c.changes), perObject(c.requests, c.changes))
	}
}

// perObject lists the requests about objects per object, by verb.
func perObject(requests map[string]int, n int) string {
	objects, _ := split(requests)
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(objects)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(objects[k])/float64(n)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func counts(requests map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(requests)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, requests[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// agreement puts the controller's counts next to the API server's and
// says whether they match. Watches are left out: the API server counts a
// watch when it ends, and the controller's are still open.
func agreement(ours, server map[string]int) string {
	keys := maps.Clone(ours)
	maps.Copy(keys, server)
	var parts, diffs []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if strings.HasPrefix(k, "watch ") {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d", k, ours[k], server[k]))
		if ours[k] != server[k] {
			diffs = append(diffs, fmt.Sprintf("%s %+d", k, server[k]-ours[k]))
		}
	}
	verdict := "match"
	if len(diffs) > 0 {
		verdict = "the API server counts " + strings.Join(diffs, ", ")
	}
	return strings.Join(parts, ", ") + ": " + verdict
}

// summarize prints the medians and spreads of one setting, the requests
// per object by phase, and the ratios of kfsm to each hand-written one.
func summarize(out io.Writer, all []result, n, workers int) {
	byImpl := map[string][]result{}
	var impls []string
	for _, r := range all {
		if r.n != n || r.workers != workers {
			continue
		}
		if _, ok := byImpl[r.impl]; !ok {
			impls = append(impls, r.impl)
		}
		byImpl[r.impl] = append(byImpl[r.impl], r)
	}
	slices.Sort(impls)
	fmt.Fprintf(out, "\n== N=%d, workers=%d: median [min–max] of %d rounds\n", n, workers, len(byImpl[impls[0]]))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\ttime to Ready (s)\tcontroller CPU (s)\tCPU/object (ms)\tafter start-up (ms)\treconciles/object\tpeak RSS (MiB)\tlive heap (MiB)\tReady / floor")
	medians := map[string][4]float64{} // time, CPU, RSS, heap
	for _, impl := range impls {
		f := figuresOf(byImpl[impl])
		medians[impl] = [4]float64{median(f.ready), median(f.cpu), median(f.rss), median(f.heap)}
		perObj, afterStart, reconciles := make([]float64, len(f.cpu)), make([]float64, len(f.cpu)), make([]float64, len(f.cpu))
		for i, c := range f.cpu {
			perObj[i], afterStart[i] = msPerObject(c, n), msPerObject(c-f.startUp[i], n)
			reconciles[i] = f.reconciles[i] / float64(n)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", impl, spread(f.ready), spread(f.cpu), spread(perObj), spread(afterStart), spread(reconciles), spread(f.rss), spread(f.heap), spread(f.overFloor))
	}
	if k, ok := medians["kfsm"]; ok {
		for _, impl := range []string{"hand", "hand-unfiltered", "hand-full"} {
			if h, ok := medians[impl]; ok {
				fmt.Fprintf(tw, "kfsm/%s\t%s\t%s\t\t\t\t%s\t%s\n", impl, ratio(k[0], h[0]), ratio(k[1], h[1]), ratio(k[2], h[2]), ratio(k[3], h[3]))
			}
		}
	}
	_ = tw.Flush()
	summarizeChanges(out, impls, byImpl)
	fmt.Fprintln(out, "requests per object, medians:")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, impl := range impls {
		rs := byImpl[impl]
		fmt.Fprintf(tw, "%s\tconverge\t%s\n", impl, medianPerObject(rs, n, func(r result) map[string]int { return r.converge }))
		fmt.Fprintf(tw, "\tresync\t%s\n", medianPerObject(rs, n, func(r result) map[string]int { return r.resync }))
		fmt.Fprintf(tw, "\trestart\t%s\n", medianPerObject(rs, n, func(r result) map[string]int { return r.restart }))
		fmt.Fprintf(tw, "\trestart, per process\t%s\n", medianPerObject(rs, 1, func(r result) map[string]int {
			_, process := split(r.restart)
			return process
		}))
		if rs[0].churn.changes > 0 {
			fmt.Fprintf(tw, "\tchurn, per change\t%s\n", medianPer(rs, func(r result) int { return r.churn.changes }, false,
				func(r result) map[string]int { return r.churn.requests }))
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
}

// figures are the measures of several runs.
type figures struct {
	ready, cpu, startUp, reconciles, rss, heap []float64
	overFloor                                  []float64 // time to Ready over the API server's floor
}

func figuresOf(rs []result) figures {
	var f figures
	for _, r := range rs {
		f.ready = append(f.ready, r.ready.Seconds())
		f.cpu = append(f.cpu, r.cpu)
		f.startUp = append(f.startUp, r.startUp)
		f.reconciles = append(f.reconciles, float64(r.readyReconciles))
		f.rss = append(f.rss, mebibytes(r.rss))
		f.heap = append(f.heap, mebibytes(r.heap))
		f.overFloor = append(f.overFloor, r.ready.Seconds()/floor(r).Seconds())
	}
	return f
}

// floor is how long the API server alone takes for the writes that the
// controller made to converge: their number at the rate at which it
// created the run's gadgets, from as many writers as the controller has
// workers.
func floor(r result) time.Duration {
	writes := 0
	for k, v := range r.converge {
		verb, _, _ := strings.Cut(k, " ")
		verb, _, _ = strings.Cut(verb, "/")
		if slices.Contains([]string{"create", "apply", "patch", "update", "delete"}, verb) {
			writes += v
		}
	}
	return time.Duration(float64(writes) * float64(r.created) / float64(r.n))
}

// medianPerObject is the median over runs of each kind of request,
// divided by n. Per-process requests are left out unless n is 1.
func medianPerObject(rs []result, n int, requests func(result) map[string]int) string {
	return medianPer(rs, func(result) int { return n }, n == 1, requests)
}

// medianPer is the median over runs of each kind of request, divided by
// per of the run. Per-process requests are left out unless withProcess.
func medianPer(rs []result, per func(result) int, withProcess bool, requests func(result) map[string]int) string {
	keys := map[string]bool{}
	for _, r := range rs {
		for k := range requests(r) {
			if withProcess || !perProcess(k) {
				keys[k] = true
			}
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		values := make([]float64, len(rs))
		for i, r := range rs {
			values[i] = float64(requests(r)[k]) / float64(per(r))
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", k, median(values)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spread(v []float64) string {
	return fmt.Sprintf("%.2f [%.2f–%.2f]", median(v), slices.Min(v), slices.Max(v))
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func msPerObject(cpu float64, n int) float64 { return 1000 * cpu / float64(n) }

func mebibytes(b int64) float64 { return float64(b) / (1 << 20) }

func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarizeChanges prints the medians and spreads of the single changes'
// latencies and of the churn's cost, with the ratios of kfsm to each
// hand-written one, if the runs measured them.
func summarizeChanges(out io.Writer, impls []string, byImpl map[string][]result) {
	first := byImpl[impls[0]][0]
	var columns []changeColumn
	if len(first.latencies) > 0 {
		columns = append(columns,
			changeColumn{"change p50 (ms)", func(r result) float64 { return latency(r, 50) }, true},
			changeColumn{"change p99 (ms)", func(r result) float64 { return latency(r, 99) }, true})
	}
	if first.churn.changes > 0 {
		columns = append(columns,
			changeColumn{"churn rate (/s)", func(r result) float64 { return r.churn.rate }, false},
			changeColumn{"churn CPU/change (ms)", func(r result) float64 { return msPerObject(r.churn.cpu, r.churn.changes) }, true})
	}
	if len(columns) == 0 {
		return
	}
	if len(first.latencies) > 0 {
		_, rank := nearestRank(first.latencies, 99)
		fmt.Fprintf(out, "single changes: %d a run, each from the write until Ready at the new generation; p99 by nearest rank: %s\n",
			len(first.latencies), rankOf(rank, len(first.latencies)))
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, c := range columns {
		fmt.Fprintf(tw, "\t%s", c.title)
	}
	fmt.Fprintln(tw)
	medians := map[string][]float64{}
	for _, impl := range impls {
		fmt.Fprint(tw, impl)
		for _, c := range columns {
			values := make([]float64, len(byImpl[impl]))
			for i, r := range byImpl[impl] {
				values[i] = c.of(r)
			}
			medians[impl] = append(medians[impl], median(values))
			fmt.Fprintf(tw, "\t%s", spread(values))
		}
		fmt.Fprintln(tw)
	}
	if k, ok := medians["kfsm"]; ok {
		for _, impl := range []string{"hand", "hand-unfiltered", "hand-full"} {
			h, ok := medians[impl]
			if !ok {
				continue
			}
			fmt.Fprintf(tw, "kfsm/%s", impl)
			for i, c := range columns {
				r := ""
				if c.ratio {
					r = ratio(k[i], h[i])
				}
				fmt.Fprintf(tw, "\t%s", r)
			}
			fmt.Fprintln(tw)
		}
	}
	_ = tw.Flush()
}

// changeColumn is a figure of the summary of the changes.
type changeColumn struct {
	title string
	of    func(result) float64
	ratio bool // kfsm's to a hand-written one's means something
}

// rankOf says which of n values a rank picks.
func rankOf(rank, n int) string {
	if rank == n {
		return fmt.Sprintf("rank %d of %d, the largest", rank, n)
	}
	return fmt.Sprintf("rank %d of %d", rank, n)
}

// latency is the p-th percentile of a run's single changes, by nearest
// rank, in milliseconds.
func latency(r result, p float64) float64 {
	d, _ := nearestRank(r.latencies, p)
	return milliseconds(d)
}

// heapSlopes prints what each implementation keeps per object: the
// growth of its median live heap, once quiet after a forced collection,
// from each size to the next, over the objects added. The process's
// fixed cost falls out of the difference.
func heapSlopes(out io.Writer, all []result) {
	type setting struct {
		impl       string
		n, workers int
	}
	heaps := map[setting][]float64{}
	var keys []setting
	for _, r := range all {
		k := setting{r.impl, r.n, r.workers}
		if _, ok := heaps[k]; !ok {
			keys = append(keys, k)
		}
		heaps[k] = append(heaps[k], float64(r.heap))
	}
	slices.SortFunc(keys, func(a, b setting) int {
		return cmp.Or(cmp.Compare(a.impl, b.impl), cmp.Compare(a.workers, b.workers), cmp.Compare(a.n, b.n))
	})
	for i := 1; i < len(keys); i++ {
		a, b := keys[i-1], keys[i]
		if a.impl != b.impl || a.workers != b.workers {
			continue
		}
		slope := (median(heaps[b]) - median(heaps[a])) / float64(b.n-a.n)
		fmt.Fprintf(out, "live heap per object, %s, workers=%d, from N=%d to N=%d: %.2f KiB\n", b.impl, b.workers, a.n, b.n, slope/1024)
	}
}
