// Package host runs the client instances of the auto-update example: each
// instance is an HTTP server on loopback that reports its version and
// answers a health check, as a real client process would. The host is
// its own service, so instances outlive an operator restart, and the
// operator drives it over HTTP:
//
//	PUT    /instances/{name}   start an instance (JSON Spec); a running one is kept
//	DELETE /instances/{name}   stop it
//	GET    /instances          the running instances (JSON []Instance)
package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Spec is what an instance runs.
type Spec struct {
	Version       string `json:"version"`
	ConfigYAML    string `json:"configYAML,omitempty"`
	StartupMillis int32  `json:"startupMillis,omitempty"`
	// Broken instances fail their health check, as a bad build would.
	Broken bool `json:"broken,omitempty"`
}

// Instance is a running instance.
type Instance struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Address string `json:"address"`
}

// Host runs instances.
type Host struct {
	mu        sync.Mutex
	instances map[string]*instance
	starts    map[string]int
	srv       *http.Server
	addr      string
}

type instance struct {
	Instance
	srv *http.Server
}

// Start serves a host with no instances on addr ("127.0.0.1:0" picks a
// port).
func Start(addr string) (*Host, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("instance host: %w", err)
	}
	h := &Host{instances: map[string]*instance{}, starts: map[string]int{}, addr: l.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /instances/{name}", h.put)
	mux.HandleFunc("DELETE /instances/{name}", h.remove)
	mux.HandleFunc("GET /instances", h.list)
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = h.srv.Serve(l) }()
	return h, nil
}

// URL is where the host serves.
func (h *Host) URL() string { return "http://" + h.addr }

// Close stops the host and its instances.
func (h *Host) Close() error {
	h.Restart()
	return h.srv.Close()
}

// Restart stops every instance, as a host that restarts forgets what it
// ran: its owner must start them again.
func (h *Host) Restart() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, in := range h.instances {
		_ = in.srv.Close()
		delete(h.instances, name)
	}
}

// Instances returns the running instances, by name.
func (h *Host) Instances() []Instance {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Instance, 0, len(h.instances))
	for _, in := range h.instances {
		out = append(out, in.Instance)
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Starts counts the instances started under name.
func (h *Host) Starts(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.starts[name]
}

func (h *Host) put(w http.ResponseWriter, req *http.Request) {
	var spec Spec
	if err := json.NewDecoder(io.LimitReader(req.Body, 64<<10)).Decode(&spec); err != nil || spec.Version == "" {
		http.Error(w, "the body must be a JSON spec with a version", http.StatusBadRequest)
		return
	}
	name := req.PathValue("name")
	h.mu.Lock()
	defer h.mu.Unlock()
	in, ok := h.instances[name]
	if !ok {
		var err error
		if in, err = run(name, spec); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h.instances[name] = in
		h.starts[name]++
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(in.Instance)
}

func (h *Host) remove(w http.ResponseWriter, req *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if in, ok := h.instances[req.PathValue("name")]; ok {
		_ = in.srv.Close()
		delete(h.instances, in.Name)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Host) list(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h.Instances())
}

// run starts one instance: it answers /version at once, and /healthz with
// 503 while it starts, then 200, or 500 for a broken build.
func run(name string, spec Spec) (*instance, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	started := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, spec.Version) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case time.Since(started) < time.Duration(spec.StartupMillis)*time.Millisecond:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		case spec.Broken:
			http.Error(w, "this build crashes on start", http.StatusInternalServerError)
		default:
			_, _ = io.WriteString(w, "ok")
		}
	})
	in := &instance{
		Instance: Instance{Name: name, Version: spec.Version, Address: l.Addr().String()},
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
	}
	go func() { _ = in.srv.Serve(l) }()
	return in, nil
}

// Client drives a host.
type Client struct {
	URL  string
	HTTP *http.Client
}

// Ensure starts an instance under name unless one runs, and returns it.
func (c *Client) Ensure(ctx context.Context, name string, spec Spec) (Instance, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return Instance{}, err
	}
	var in Instance
	err = c.do(ctx, http.MethodPut, "/instances/"+name, string(body), &in)
	return in, err
}

// Remove stops the instance under name; one that does not run is fine.
func (c *Client) Remove(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/instances/"+name, "", nil)
}

// Health is the answer of an instance's health check.
type Health int

const (
	// Healthy: the instance answered 200.
	Healthy Health = iota
	// Starting: the instance answered 503; it is not ready yet.
	Starting
	// Unhealthy: any other answer, or none in time.
	Unhealthy
)

// Check asks the instance at address for its health, within timeout.
func (c *Client) Check(ctx context.Context, address string, timeout time.Duration) (Health, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+address+"/healthz", nil)
	if err != nil {
		return Unhealthy, err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return Unhealthy, err
	}
	defer func() { _ = resp.Body.Close() }()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	switch resp.StatusCode {
	case http.StatusOK:
		return Healthy, nil
	case http.StatusServiceUnavailable:
		return Starting, nil
	}
	return Unhealthy, fmt.Errorf("health check: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 5 * time.Second}
}

func (c *Client) do(ctx context.Context, method, path, body string, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return fmt.Errorf("instance host: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("instance host: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if into == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return errors.Join(errors.New("instance host: bad answer"), err)
	}
	return nil
}
