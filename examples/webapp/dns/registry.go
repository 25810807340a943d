// Package dns is a small DNS registry: an HTTP service that keeps name →
// target records, standing for the external DNS provider that a real web
// app operator would call. The web app's deletion path must remove its
// record before the app may go.
package dns

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Registry serves the records over HTTP:
//
//	PUT    /records/{name}   body: the target
//	GET    /records/{name}   the target, or 404
//	DELETE /records/{name}
//	GET    /records          all records, as a JSON object
type Registry struct {
	mu      sync.Mutex
	records map[string]string
	srv     *http.Server
	addr    string
}

// Start serves a new, empty registry on addr ("127.0.0.1:0" picks a port).
func Start(addr string) (*Registry, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dns registry: %w", err)
	}
	r := &Registry{records: map[string]string{}, addr: l.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /records/{name}", r.put)
	mux.HandleFunc("GET /records/{name}", r.get)
	mux.HandleFunc("DELETE /records/{name}", r.remove)
	mux.HandleFunc("GET /records", r.list)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// URL is where the registry serves.
func (r *Registry) URL() string { return "http://" + r.addr }

// Close stops serving; the records are kept, so that a registry started
// again with Restart serves them.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv.Close()
}

// Restart serves the records again at the same address after Close.
func (r *Registry) Restart() error {
	l, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("dns registry: %w", err)
	}
	r.mu.Lock()
	srv := &http.Server{Handler: r.srv.Handler, ReadHeaderTimeout: 5 * time.Second}
	r.srv = srv
	r.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// Records returns a copy of the records.
func (r *Registry) Records() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.records))
	for k, v := range r.records {
		out[k] = v
	}
	return out
}

func (r *Registry) put(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1024))
	target := strings.TrimSpace(string(body))
	if err != nil || target == "" {
		http.Error(w, "the body must be the record's target", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.records[req.PathValue("name")] = target
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *Registry) get(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	target, ok := r.records[req.PathValue("name")]
	r.mu.Unlock()
	if !ok {
		http.NotFound(w, req)
		return
	}
	_, _ = io.WriteString(w, target)
}

func (r *Registry) remove(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	delete(r.records, req.PathValue("name"))
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *Registry) list(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.Records())
}

// Client talks to a registry.
type Client struct {
	URL  string
	HTTP *http.Client
}

// Register points name at target.
func (c *Client) Register(ctx context.Context, name, target string) error {
	return c.do(ctx, http.MethodPut, name, target)
}

// Deregister removes name; removing a name that is not there is fine.
func (c *Client) Deregister(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, name, "")
}

func (c *Client) do(ctx context.Context, method, name, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, c.URL+"/records/"+name, strings.NewReader(body))
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("dns registry: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("dns registry: %s %s: %s: %s", method, name, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
