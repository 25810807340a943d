package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Only the workload's resources are compared with the API server's own
// count; the driver's requests are of others, or are watches.
var workloadResources = map[string]bool{"configmaps": true, "services": true, "gadgets": true, "gadgets/status": true, "events": true}

// serverRequests reads apiserver_request_total from the API server, by
// "verb resource", for the workload's resources. Lists and watches are
// left out: the driver makes some, and a watch is counted when it ends.
func (d *driver) serverRequests(ctx context.Context) (map[string]int, error) {
	data, err := d.discovery.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseRequestTotals(data), nil
}

var metricVerbs = map[string]string{
	"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "APPLY": "apply", "DELETE": "delete",
}

func parseRequestTotals(data []byte) map[string]int {
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		labels := parseLabels(line[len("apiserver_request_total{"):end])
		value, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		verb, ok := metricVerbs[labels["verb"]]
		resource := labels["resource"]
		if labels["subresource"] != "" {
			resource += "/" + labels["subresource"]
		}
		if !ok || !workloadResources[resource] {
			continue
		}
		out[verb+" "+resource] += int(value)
	}
	return out
}

func parseLabels(s string) map[string]string {
	labels := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if ok {
			labels[k] = strings.Trim(v, `"`)
		}
	}
	return labels
}

// splitListWatch separates the per-type lists and watches of a process's
// start from the requests about objects.
func splitListWatch(requests map[string]int) (objects, listWatch map[string]int) {
	objects, listWatch = map[string]int{}, map[string]int{}
	for k, v := range requests {
		if strings.HasPrefix(k, "list ") || strings.HasPrefix(k, "watch ") {
			listWatch[k] = v
		} else {
			objects[k] = v
		}
	}
	return objects, listWatch
}

func (r result) line() string {
	return fmt.Sprintf("%-4s n=%-6d workers=%d round %d: Ready in %6.2fs, CPU %6.2fs (%.2f ms/object), peak RSS %4.0f MB; to converge %s; restart %s; API server agrees: %s",
		r.impl, r.n, r.workers, r.round, r.ready.Seconds(), r.cpu, 1000*r.cpu/float64(r.n), float64(r.rss)/1e6,
		perObject(r.converge, r.n, false), perObject(r.restart, r.n, true), agreement(r.converge, r.server))
}

// perObject lists requests per object by verb; lists and watches, which
// are per type, are left out unless all is set.
func perObject(requests map[string]int, n int, all bool) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(requests)) {
		if !all && (strings.HasPrefix(k, "list ") || strings.HasPrefix(k, "watch ")) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(requests[k])/float64(n)))
	}
	if len(parts) == 0 {
		return "0 requests"
	}
	return strings.Join(parts, ", ")
}

// agreement compares the controller's count of its writes and gets with
// the API server's count.
func agreement(ours, server map[string]int) string {
	var diffs []string
	keys := map[string]bool{}
	for k := range ours {
		keys[k] = true
	}
	for k := range server {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		verb, resource, _ := strings.Cut(k, " ")
		if verb == "list" || verb == "watch" || !workloadResources[resource] {
			continue
		}
		if ours[k] != server[k] {
			diffs = append(diffs, fmt.Sprintf("%s %d (controller) vs %d (server)", k, ours[k], server[k]))
		}
	}
	if len(diffs) == 0 {
		return "yes"
	}
	return strings.Join(diffs, "; ")
}

// summarize prints the medians and spreads of one setting, and the
// ratios of kfsm to hand-written.
func summarize(out io.Writer, results []result, n, workers int) {
	fmt.Fprintf(out, "\nN=%d, %d workers: median [min–max] of %s\n", n, workers, "rounds")
	med := map[string][3]float64{}
	for _, impl := range []string{"hand", "kfsm"} {
		var ready, cpu, rss []float64
		var last result
		for _, r := range results {
			if r.impl == impl && r.n == n && r.workers == workers {
				ready, cpu, rss = append(ready, r.ready.Seconds()), append(cpu, r.cpu), append(rss, float64(r.rss)/1e6)
				last = r
			}
		}
		if len(ready) == 0 {
			continue
		}
		med[impl] = [3]float64{median(ready), median(cpu), median(rss)}
		fmt.Fprintf(out, "  %-4s Ready %s s, CPU %s s (%.2f ms/object), peak RSS %s MB\n", impl, spread(ready), spread(cpu), 1000*median(cpu)/float64(n), spread(rss))
		fmt.Fprintf(out, "       requests per object to converge: %s\n", perObject(last.converge, n, false))
		fmt.Fprintf(out, "       on a restart over converged objects: %s (and per type: %s)\n", perObject(last.restart, n, false), perObject(last.restartListWatch, 1, true))
	}
	if h, k := med["hand"], med["kfsm"]; h[0] > 0 && k[0] > 0 {
		fmt.Fprintf(out, "  kfsm/hand: time to Ready %.2f×, CPU %.2f×, peak RSS %.2f×\n\n", k[0]/h[0], k[1]/h[1], k[2]/h[2])
	}
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

// describeMachine prints what the figures were measured on.
func (d *driver) describeMachine() error {
	v, err := d.discovery.ServerVersion()
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "machine: %s, %d CPUs (GOMAXPROCS %d), %s memory; %s; kube-apiserver %s\n\n",
		procField("/proc/cpuinfo", "model name"), runtime.NumCPU(), runtime.GOMAXPROCS(0), procField("/proc/meminfo", "MemTotal"), runtime.Version(), v.GitVersion)
	return nil
}

// procField reads the first "key: value" line of a /proc file.
func procField(path, key string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
