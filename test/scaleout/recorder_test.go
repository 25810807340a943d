//go:build linux

package scaleout_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// recorder is told by the replicas' handlers when each run begins and
// ends, and stamps both with the time they arrive. It runs in the test on
// loopback; a handler waits for its answer, so the interval it keeps lies
// within the run.
type recorder struct {
	t   *testing.T
	srv *httptest.Server

	mu     sync.Mutex
	runs   map[types.UID][]*interval // by object, in the order they began
	open   map[runKey]*interval
	killed map[string]time.Time // replicas that the test SIGKILLed, and when
	faults []string             // reports that fit no interval
}

// handlerRun is what a handler reports: by whom, of which object and
// generation, and at its end whether it ran to completion. The operator
// sends the same fields.
type handlerRun struct {
	Replica    string    `json:"replica"`
	UID        types.UID `json:"uid"`
	Generation int64     `json:"generation"`
	Done       bool      `json:"done,omitempty"`
}

// runKey names the open run of a replica on an object: a replica never
// reconciles an object twice at once.
type runKey struct {
	replica string
	uid     types.UID
}

// interval is one handler run as the recorder saw it.
type interval struct {
	handlerRun
	begin, end time.Time // end is zero while the run is open
}

func (i *interval) String() string {
	end := "open"
	if !i.end.IsZero() {
		end = i.end.Format("15:04:05.000")
	}
	return fmt.Sprintf("%s gen %d %s–%s", i.Replica, i.Generation, i.begin.Format("15:04:05.000"), end)
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{t: t, runs: map[types.UID][]*interval{}, open: map[runKey]*interval{}, killed: map[string]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /begin", r.serve(r.begin))
	mux.HandleFunc("POST /end", r.serve(r.end))
	r.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		r.srv.CloseClientConnections()
		r.srv.Close()
	})
	return r
}

// URL is the base URL that the replicas report to.
func (r *recorder) URL() string { return r.srv.URL }

// serve stamps a report with the time it arrived and hands it to record.
func (r *recorder) serve(record func(handlerRun, time.Time)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		var run handlerRun
		if err := json.NewDecoder(req.Body).Decode(&run); err != nil || run.Replica == "" || run.UID == "" {
			http.Error(w, fmt.Sprintf("want a replica, a uid and a generation: %v", err), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		record(run, time.Now())
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
}

func (r *recorder) begin(run handlerRun, at time.Time) {
	k := runKey{run.Replica, run.UID}
	if i, ok := r.open[k]; ok {
		r.faults = append(r.faults, fmt.Sprintf("%s began a run of %s while its run %s was open", run.Replica, run.UID, i))
	}
	i := &interval{handlerRun: run, begin: at}
	r.open[k] = i
	r.runs[run.UID] = append(r.runs[run.UID], i)
}

func (r *recorder) end(run handlerRun, at time.Time) {
	k := runKey{run.Replica, run.UID}
	i, ok := r.open[k]
	if !ok || i.Generation != run.Generation {
		r.faults = append(r.faults, fmt.Sprintf("%s ended a run of %s gen %d that it had not begun", run.Replica, run.UID, run.Generation))
		return
	}
	i.end, i.Done = at, run.Done
	delete(r.open, k)
}

// kill tells the recorder that replica was SIGKILLed at: its open runs
// ended then.
func (r *recorder) kill(replica string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killed[replica] = at
}

// until is when interval i ended, or ends at the latest: an open run of a
// killed replica ended when it was killed (or when it began, if its
// report arrived after the kill), and an open run of a live replica goes
// on now.
func (r *recorder) until(i *interval, now time.Time) time.Time {
	if !i.end.IsZero() {
		return i.end
	}
	if at, ok := r.killed[i.Replica]; ok {
		if at.Before(i.begin) {
			return i.begin
		}
		return at
	}
	return now
}

// begunBy describes the runs of replica that began after from and before
// to.
func (r *recorder) begunBy(replica string, from, to time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for uid, runs := range r.runs {
		for _, i := range runs {
			if i.Replica == replica && i.begin.After(from) && i.begin.Before(to) {
				out = append(out, fmt.Sprintf("%s %s", uid, i))
			}
		}
	}
	return out
}

// overlaps describes every pair of runs on one object, by different
// replicas, that overlap in time.
func (r *recorder) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var out []string
	for uid, runs := range r.runs {
		for n, a := range runs {
			for _, b := range runs[n+1:] {
				if a.Replica != b.Replica && a.begin.Before(r.until(b, now)) && b.begin.Before(r.until(a, now)) {
					out = append(out, fmt.Sprintf("%s: %s and %s", uid, a, b))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// unfinished describes the open runs of replicas that were not killed.
func (r *recorder) unfinished() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, i := range r.open {
		if _, ok := r.killed[i.Replica]; !ok {
			out = append(out, fmt.Sprintf("%s: %s", i.UID, i))
		}
	}
	slices.Sort(out)
	return out
}

// openBy describes the open runs of replica.
func (r *recorder) openBy(replica string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k, i := range r.open {
		if k.replica == replica {
			out = append(out, fmt.Sprintf("%s: %s", i.UID, i))
		}
	}
	return out
}

// reportFaults returns the reports that fit no interval.
func (r *recorder) reportFaults() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.faults)
}

// handlers returns, for each object, the replicas that ran its handler on
// generation gen.
func (r *recorder) handlers(gen int64) map[types.UID][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[types.UID][]string{}
	for uid, runs := range r.runs {
		for _, i := range runs {
			if i.Generation == gen && !slices.Contains(out[uid], i.Replica) {
				out[uid] = append(out[uid], i.Replica)
			}
		}
	}
	return out
}

// last returns, for each object, the replica whose run on generation gen
// began last; with gen 0, of any generation.
func (r *recorder) last(gen int64) map[types.UID]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[types.UID]string{}
	for uid, runs := range r.runs {
		for _, i := range runs {
			if gen == 0 || i.Generation == gen {
				out[uid] = i.Replica
			}
		}
	}
	return out
}

// firstBegin is the earliest begin of a run of one of uids on generation
// gen.
func (r *recorder) firstBegin(uids []types.UID, gen int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var f time.Time
	for _, uid := range uids {
		for _, i := range r.runs[uid] {
			if i.Generation == gen && (f.IsZero() || i.begin.Before(f)) {
				f = i.begin
			}
		}
	}
	return f
}

// lastEnd is the latest end of a run of one of uids on generation gen.
func (r *recorder) lastEnd(uids []types.UID, gen int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var l time.Time
	for _, uid := range uids {
		for _, i := range r.runs[uid] {
			if i.Generation == gen && i.end.After(l) {
				l = i.end
			}
		}
	}
	return l
}

// repeated describes the objects and generations whose handler ran to
// completion more than once in the runs that began after since: work
// done again. A hand-over may cost one run of an object that its old
// owner completed already, never two.
func (r *recorder) repeated(since time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for uid, runs := range r.runs {
		done := map[int64][]string{}
		for _, i := range runs {
			if i.Done && i.begin.After(since) {
				done[i.Generation] = append(done[i.Generation], i.String())
			}
		}
		for gen, by := range done {
			if len(by) > 1 {
				out = append(out, fmt.Sprintf("%s gen %d: %s", uid, gen, strings.Join(by, ", ")))
			}
		}
	}
	slices.Sort(out)
	return out
}

// completed counts the runs that ran to completion, and the distinct
// objects and generations among them.
func (r *recorder) completed() (runs, pairs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type pair struct {
		uid types.UID
		gen int64
	}
	seen := map[pair]bool{}
	for uid, is := range r.runs {
		for _, i := range is {
			if i.Done {
				runs++
				seen[pair{uid, i.Generation}] = true
			}
		}
	}
	return runs, len(seen)
}

// runsBy counts the handler runs of each replica.
func (r *recorder) runsBy() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, runs := range r.runs {
		for _, i := range runs {
			out[i.Replica]++
		}
	}
	return out
}

// check fails the test for every overlap and every report that fit no
// interval, listing at most a few of each.
func (r *recorder) check(when string) {
	r.t.Helper()
	if o := r.overlaps(); len(o) > 0 {
		r.t.Errorf("%s: %d pairs of runs of one object by two replicas overlap: %s", when, len(o), first(o, 10))
	}
	if f := r.reportFaults(); len(f) > 0 {
		r.t.Errorf("%s: %d reports fit no run: %s", when, len(f), first(f, 10))
	}
}

// first joins up to n of s.
func first(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, "; ")
	}
	return strings.Join(s[:n], "; ") + fmt.Sprintf("; and %d more", len(s)-n)
}
