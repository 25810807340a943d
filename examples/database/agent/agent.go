// Package agent is the database agent of the database example, the
// "sidecar" of OKT: it runs next to the databases and reports and changes
// their actual state over HTTP. Its operations take real time.
//
//	GET  /databases/{name}            the database (JSON Database); 404 if unknown
//	POST /databases/{name}/start      start it (stopped → running)
//	POST /databases/{name}/service    enter maintenance (running → servicing)
//	POST /databases/{name}/resume     leave maintenance (servicing → running)
//	POST /databases/{name}/stop       stop it
//	POST /databases/{name}/backup?id= take a backup (servicing only)
//	PUT  /databases/{name}/config     apply a configuration (JSON; servicing only)
//	DELETE /databases/{name}          forget it
//
// Names are "namespace.name" so that they fit in one path segment.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// The actual states of a database.
const (
	Stopped   = "stopped"
	Running   = "running"
	Servicing = "servicing"
)

// Database is what the agent knows of one database.
type Database struct {
	State   string            `json:"state"`
	Backups []string          `json:"backups,omitempty"`
	Config  map[string]string `json:"config,omitempty"`
}

// Timings are how long the agent's operations take.
type Timings struct {
	Start, Stop, Backup, Configure time.Duration
}

// Agent serves the databases' actual state.
type Agent struct {
	timings Timings

	mu    sync.Mutex
	dbs   map[string]*Database
	taken map[string]int // backups taken, by database, the forgotten too
	srv   *http.Server
	url   string
}

// Start serves an agent with no databases on addr ("127.0.0.1:0" picks a
// port).
func Start(addr string, timings Timings) (*Agent, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("database agent: %w", err)
	}
	a := &Agent{timings: timings, dbs: map[string]*Database{}, taken: map[string]int{}, url: "http://" + l.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /databases/{name}", a.get)
	mux.HandleFunc("DELETE /databases/{name}", a.forget)
	mux.HandleFunc("POST /databases/{name}/{op}", a.operate)
	mux.HandleFunc("PUT /databases/{name}/config", a.configure)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = a.srv.Serve(l) }()
	return a, nil
}

// URL is where the agent serves.
func (a *Agent) URL() string { return a.url }

// Close stops the agent.
func (a *Agent) Close() error { return a.srv.Close() }

// BackupsTaken counts the backups taken of the databases whose names
// start with prefix, those forgotten since too. A backup, unlike a
// state, happens once for each request.
func (a *Agent) BackupsTaken(prefix string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for name, taken := range a.taken {
		if strings.HasPrefix(name, prefix) {
			n += taken
		}
	}
	return n
}

// Database returns a copy of what the agent knows of name.
func (a *Agent) Database(name string) (Database, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	db, ok := a.dbs[name]
	if !ok {
		return Database{}, false
	}
	return Database{State: db.State, Backups: append([]string(nil), db.Backups...), Config: maps.Clone(db.Config)}, true
}

// Names lists the databases whose names start with prefix, in order.
func (a *Agent) Names(prefix string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var names []string
	for name := range a.dbs {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func (a *Agent) get(w http.ResponseWriter, req *http.Request) {
	db, ok := a.Database(req.PathValue("name"))
	if !ok {
		http.Error(w, "no such database", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(db)
}

func (a *Agent) forget(w http.ResponseWriter, req *http.Request) {
	a.mu.Lock()
	delete(a.dbs, req.PathValue("name"))
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// operate runs one operation: it checks the state, takes its time, and
// moves the database on.
func (a *Agent) operate(w http.ResponseWriter, req *http.Request) {
	name, op := req.PathValue("name"), req.PathValue("op")
	type step struct {
		from    []string
		to      string
		takes   time.Duration
		creates bool
	}
	steps := map[string]step{
		"start":   {from: []string{Stopped, Running}, to: Running, takes: a.timings.Start, creates: true},
		"service": {from: []string{Running, Servicing}, to: Servicing},
		"resume":  {from: []string{Servicing, Running}, to: Running},
		"stop":    {from: []string{Running, Servicing, Stopped}, to: Stopped, takes: a.timings.Stop},
		"backup":  {from: []string{Servicing}, takes: a.timings.Backup},
	}
	s, ok := steps[op]
	if !ok {
		http.Error(w, "unknown operation "+op, http.StatusNotFound)
		return
	}
	if err := a.check(name, s.from, s.creates); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	select {
	case <-time.After(s.takes):
	case <-req.Context().Done():
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	db := a.dbs[name]
	if s.to != "" {
		db.State = s.to
	}
	if op == "backup" {
		db.Backups = append(db.Backups, req.URL.Query().Get("id"))
		a.taken[name]++
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) configure(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("name")
	var config map[string]string
	if err := json.NewDecoder(io.LimitReader(req.Body, 64<<10)).Decode(&config); err != nil {
		http.Error(w, "the body must be a JSON object of strings", http.StatusBadRequest)
		return
	}
	if err := a.check(name, []string{Servicing}, false); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	select {
	case <-time.After(a.timings.Configure):
	case <-req.Context().Done():
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dbs[name].Config = config
	w.WriteHeader(http.StatusNoContent)
}

// check reports whether database name is in one of the states from;
// create makes an unknown database, stopped.
func (a *Agent) check(name string, from []string, create bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	db, ok := a.dbs[name]
	if !ok {
		if !create {
			return fmt.Errorf("no database %s", name)
		}
		db = &Database{State: Stopped}
		a.dbs[name] = db
	}
	for _, s := range from {
		if db.State == s {
			return nil
		}
	}
	return fmt.Errorf("database %s is %s, not %s", name, db.State, strings.Join(from, " or "))
}

// Client talks to an agent.
type Client struct {
	URL  string
	HTTP *http.Client
}

// ErrUnknown is returned by Get for a database the agent does not know.
var ErrUnknown = errors.New("unknown database")

// Get returns the actual state of database name.
func (c *Client) Get(ctx context.Context, name string) (Database, error) {
	var db Database
	err := c.do(ctx, http.MethodGet, "/databases/"+name, nil, &db)
	return db, err
}

// Do runs operation op (start, service, resume, stop) on database name.
func (c *Client) Do(ctx context.Context, name, op string) error {
	return c.do(ctx, http.MethodPost, "/databases/"+name+"/"+op, nil, nil)
}

// Backup takes a backup of database name under id.
func (c *Client) Backup(ctx context.Context, name, id string) error {
	return c.do(ctx, http.MethodPost, "/databases/"+name+"/backup?id="+id, nil, nil)
}

// Configure applies config to database name.
func (c *Client) Configure(ctx context.Context, name string, config map[string]string) error {
	return c.do(ctx, http.MethodPut, "/databases/"+name+"/config", config, nil)
}

// Forget removes database name from the agent.
func (c *Client) Forget(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/databases/"+name, nil, nil)
}

func (c *Client) do(ctx context.Context, method, path string, body, into any) error {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = strings.NewReader(string(data))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, r)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: time.Minute}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("database agent: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusNotFound && method == http.MethodGet {
		return ErrUnknown
	}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("database agent: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if into != nil {
		return json.NewDecoder(resp.Body).Decode(into)
	}
	return nil
}
