package fsmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kfsm/kfsm/fsmtest/internal/explore"
)

// Explore's delays: of one watch event (and those after it on its watch)
// and, under lag, of every one.
const (
	eventDelay = time.Second
	exploreLag = 300 * time.Millisecond
)

// watch sends a read of the operator's. The events of a watch pass the
// faults that strike watch events, and reach the operator late under a
// lag; a watch that a fault broke is answered 410 Gone once, so that the
// operator's cache lists anew.
func (f *faults) watch(next http.RoundTripper, req *http.Request, res string) (*http.Response, error) {
	q := req.URL.Query().Get("watch")
	if f == nil || (q != "true" && q != "1") {
		resp, err := next.RoundTrip(req)
		if f != nil && err == nil && resp.StatusCode == http.StatusOK {
			f.relisted(res)
		}
		return resp, err
	}
	if f.takeGone(res) {
		return gone(req, res), nil
	}
	resp, err := next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	f.relisted(res)
	if f.trace != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		resp.Body = f.events(resp.Body, res, req.URL.Query().Get("sendInitialEvents") == "true")
	}
	if f.watchLag > 0 {
		resp.Body = lagging(resp.Body, f.watchLag)
	}
	return resp, nil
}

// events passes the events of a watch of resource res to the operator,
// one by one, counting them and striking those that the faults name. The
// events that a watch sends first to fill a cache (initial, until its
// bookmark) are a list in all but name, which the manager waits for: they
// are passed on as they are.
func (f *faults) events(body io.ReadCloser, res string, initial bool) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		defer func() { _ = body.Close() }()
		dec := json.NewDecoder(body)
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				_ = pw.Close()
				return
			}
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			_ = json.Unmarshal(raw, &ev)
			switch {
			case ev.Type == "BOOKMARK":
				initial = false
			case ev.Type != "ERROR" && !initial:
				n, seq := f.trace.Event(res, ev.Type, ev.Object)
				if f.strikes(explore.Atom{Kind: explore.Relist, N: n, Res: res}, seq) {
					f.trace.Hold() // until the cache listed anew
					f.setGone(res)
					_ = pw.Close()
					return
				}
				if f.strikes(explore.Atom{Kind: explore.Delay, N: n, Res: res}, seq) {
					f.trace.Hold()
					time.Sleep(eventDelay)
					f.trace.Release()
				}
			}
			if _, err := pw.Write(append(raw, '\n')); err != nil {
				return
			}
		}
	}()
	return &lagBody{PipeReader: pr, body: body}
}

func (f *faults) setGone(res string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone == nil {
		f.gone = map[string]bool{}
	}
	f.gone[res] = true
}

// takeGone reports whether the watch of res is to be answered 410 Gone,
// once: the cache lists anew after it.
func (f *faults) takeGone(res string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.gone[res] {
		return false
	}
	delete(f.gone, res)
	if f.listing == nil {
		f.listing = map[string]bool{}
	}
	f.listing[res] = true
	return true
}

// relisted notes a list or a watch of res that the API server answered:
// after a 410 Gone, the cache is current again.
func (f *faults) relisted(res string) {
	f.mu.Lock()
	was := f.listing[res]
	delete(f.listing, res)
	f.mu.Unlock()
	if was {
		f.trace.Release()
	}
}

// gone is the API server's answer to a watch from a version it no longer
// keeps: the client lists anew.
func gone(req *http.Request, res string) *http.Response {
	body, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": http.StatusGone,
		"message": fmt.Sprintf("too old resource version for %s (injected by fsmtest)", res),
	})
	return &http.Response{
		StatusCode: http.StatusGone, Status: "410 Gone", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req,
	}
}
