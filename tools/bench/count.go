package main

import (
	"bufio"
	"bytes"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// requestCounter counts a process's API requests by "verb resource", as
// apiserver_request_total names them, and remembers when the latest one
// started or ended, Leases aside: a sharded replica renews its Lease
// every RetryPeriod, however quiet its work.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	last   time.Time
}

func newRequestCounter() *requestCounter {
	return &requestCounter{counts: map[string]int{}, last: time.Now()}
}

// wrap is a rest.Config's WrapTransport: every client of the process
// counts through it.
func (c *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		key := requestKey(req)
		work := !strings.HasSuffix(key, " leases")
		c.started(key, work)
		if work {
			defer c.touch()
		}
		return next.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (c *requestCounter) started(key string, work bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[key]++
	if work {
		c.last = time.Now()
	}
}

func (c *requestCounter) touch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = time.Now()
}

// snapshot returns the counts and how long ago the latest request started
// or ended.
func (c *requestCounter) snapshot() (map[string]int, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts), time.Since(c.last)
}

// decodeCounter counts the Gadgets that a process's cache decodes, from
// lists and watch events, and the distinct ones: a sharded replica's
// cache should decode its slice of them only.
type decodeCounter struct {
	mu      sync.Mutex
	decodes int
	seen    map[types.UID]struct{}
}

func newDecodeCounter() *decodeCounter {
	return &decodeCounter{seen: map[types.UID]struct{}{}}
}

// transform is the Gadget informer's cache transform: it counts each
// object that the informer receives and changes nothing.
func (c *decodeCounter) transform(obj any) (any, error) {
	o, ok := obj.(client.Object)
	if !ok {
		return obj, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decodes++
	c.seen[o.GetUID()] = struct{}{}
	return obj, nil
}

// snapshot returns the decodes and the distinct objects decoded.
func (c *decodeCounter) snapshot() (decodes, distinct int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.decodes, len(c.seen)
}

// requestKey names a request "verb resource". The verb is get, list,
// watch, create, update, patch, apply (a server-side apply patch) or
// delete, with "/status" for the status subresource; resource is the
// plural, such as configmaps. Requests for no resource (discovery, the
// OpenAPI document) are "get discovery".
func requestKey(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(req.Method) + " discovery"
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	named := len(parts) > 1
	verb := methodVerb(req, named)
	if len(parts) > 2 {
		verb += "/" + parts[2]
	}
	return verb + " " + parts[0]
}

func methodVerb(req *http.Request, named bool) string {
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			return "watch"
		case named:
			return "get"
		}
		return "list"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		if strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch") {
			return "apply"
		}
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	return strings.ToLower(req.Method)
}

// perProcess says whether requests with key are made once per process or
// per type, rather than per object: lists, watches and discovery.
func perProcess(key string) bool {
	verb, resource, _ := strings.Cut(key, " ")
	return verb == "list" || verb == "watch" || resource == "discovery"
}

// split separates a process's requests about objects from its per-process
// ones.
func split(requests map[string]int) (objects, process map[string]int) {
	objects, process = map[string]int{}, map[string]int{}
	for k, v := range requests {
		if perProcess(k) {
			process[k] = v
		} else {
			objects[k] = v
		}
	}
	return objects, process
}

// subtract returns after - before, without the keys that did not change.
func subtract(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// The resources whose requests are compared with the API server's count.
var workloadResources = []string{"configmaps", "services", "gadgets", "events"}

// serverVerbs maps the verb label of apiserver_request_total to the
// transport's names.
var serverVerbs = map[string]string{
	"GET": "get", "LIST": "list", "WATCH": "watch", "POST": "create", "PUT": "update",
	"PATCH": "patch", "APPLY": "apply", "DELETE": "delete", "DELETECOLLECTION": "deletecollection",
}

const requestTotal = "apiserver_request_total{"

// parseRequestTotals sums apiserver_request_total, from the API server's
// metrics in the text format, by "verb resource" for the workload's
// resources.
func parseRequestTotals(data []byte) map[string]int {
	out := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, requestTotal) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		value, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		labels := parseLabels(line[len(requestTotal):end])
		verb, ok := serverVerbs[labels["verb"]]
		if !ok || !slices.Contains(workloadResources, labels["resource"]) {
			continue
		}
		if sub := labels["subresource"]; sub != "" {
			verb += "/" + sub
		}
		out[verb+" "+labels["resource"]] += int(value)
	}
	return out
}

// parseLabels reads the labels of a sample; the values of the labels that
// matter here hold no commas or quotes.
func parseLabels(s string) map[string]string {
	labels := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			labels[k] = strings.Trim(v, `"`)
		}
	}
	return labels
}

// ofWorkload keeps the requests for the workload's resources.
func ofWorkload(requests map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range requests {
		_, resource, _ := strings.Cut(k, " ")
		if slices.Contains(workloadResources, resource) {
			out[k] = v
		}
	}
	return out
}
