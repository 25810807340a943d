package explore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Faults strikes the faults of a schedule at the points of a run where
// the operator's requests and actions reach them. Writes are numbered
// from 1 by object, across the run's processes: the writes to one object
// follow its walks in one order from run to run, where those to several
// interleave as the machine's load has them. Watch events are numbered
// by resource, and action starts and ends across the run.
type Faults struct {
	schedule map[Atom]bool
	lag      time.Duration // watch events reach the operator this late
	trace    *Tracker      // records where faults may strike

	starts, ends atomic.Int64 // action starts and ends so far

	mu      sync.Mutex
	writes  map[string]int  // writes so far, by object
	gone    map[string]bool // resources whose next watch is answered 410 Gone
	listing map[string]bool // resources whose cache lists anew after a 410 Gone
}

// Write counts a write to object, RESOURCE/NAME (the namespace is each
// run's own), and returns the write's number among its writes.
func (f *Faults) Write(object string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writes == nil {
		f.writes = map[string]int{}
	}
	f.writes[object]++
	return f.writes[object]
}

// Scheduled makes the faults of a schedule, recording its points in
// trace, with every watch event lag late under a lag.
func Scheduled(s Schedule, lag time.Duration, trace *Tracker) *Faults {
	f := &Faults{schedule: map[Atom]bool{}, trace: trace}
	for _, a := range s {
		if a.Kind == Lag {
			f.lag = lag
		}
		f.schedule[a] = true
	}
	return f
}

// Strikes reports whether the schedule holds atom a, and notes where it
// struck, the point seq.
func (f *Faults) Strikes(a Atom, seq int) bool {
	if f == nil || !f.schedule[a] {
		return false
	}
	f.trace.Struck(a, seq)
	return true
}

// Trace is the tracker of the run's points.
func (f *Faults) Trace() *Tracker { return f.trace }

// Lag is how late every watch event reaches the operator: zero unless
// the schedule has a lag.
func (f *Faults) Lag() time.Duration { return f.lag }

// Action records the start of an action's work, or its end, and reports
// whether the process dies there.
func (f *Faults) Action(end bool, obj types.NamespacedName, name string) bool {
	n, kind := &f.starts, ActionStart
	if end {
		n, kind = &f.ends, ActionEnd
	}
	at := Atom{Kind: kind, N: int(n.Add(1))}
	return f.Strikes(at, f.trace.Action(at, obj, name))
}

// eventDelay is how late a delay fault makes a watch event, and those
// after it on its watch.
const eventDelay = time.Second

// Watch sends a read of the operator's, of resource res, to next. The
// events of a watch pass the faults that strike watch events, and reach
// the operator late under a lag; a watch that a fault broke is answered
// 410 Gone once, so that the operator's cache lists anew.
func (f *Faults) Watch(next http.RoundTripper, req *http.Request, res string) (*http.Response, error) {
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
	if f.lag > 0 {
		resp.Body = lagging(resp.Body, f.lag)
	}
	return resp, nil
}

// events passes the events of a watch of resource res to the operator,
// one by one, counting them and striking those that the faults name. The
// events that a watch sends first to fill a cache (initial, until its
// bookmark) are a list in all but name, which the manager waits for: they
// are passed on as they are.
func (f *Faults) events(body io.ReadCloser, res string, initial bool) io.ReadCloser {
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
				if f.Strikes(Atom{Kind: Relist, N: n, Res: res}, seq) {
					f.trace.Hold() // until the cache listed anew
					f.setGone(res)
					_ = pw.Close()
					return
				}
				if f.Strikes(Atom{Kind: Delay, N: n, Res: res}, seq) {
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

func (f *Faults) setGone(res string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone == nil {
		f.gone = map[string]bool{}
	}
	f.gone[res] = true
}

// takeGone reports whether the watch of res is to be answered 410 Gone,
// once: the cache lists anew after it.
func (f *Faults) takeGone(res string) bool {
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
func (f *Faults) relisted(res string) {
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

// lagging delays what body delivers by lag: a watch whose events reach
// the operator's cache late, as a loaded API server or network does.
func lagging(body io.ReadCloser, lag time.Duration) io.ReadCloser {
	pr, pw := io.Pipe()
	type chunk struct {
		at   time.Time
		data []byte
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32*1024)
		for {
			n, err := body.Read(buf)
			if n > 0 {
				chunks <- chunk{at: time.Now().Add(lag), data: bytes.Clone(buf[:n])}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		failed := false
		for c := range chunks { // to the end, so that the reader never blocks
			if failed {
				continue
			}
			time.Sleep(time.Until(c.at))
			_, err := pw.Write(c.data)
			failed = err != nil
		}
		_ = pw.Close()
	}()
	return &lagBody{PipeReader: pr, body: body}
}

type lagBody struct {
	*io.PipeReader
	body io.ReadCloser
}

func (b *lagBody) Close() error {
	_ = b.PipeReader.Close()
	return b.body.Close()
}
