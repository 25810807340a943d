package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kfsm/kfsm/fsm"
)

// walkLog is a sharded replica's record of its walks, a line each: the
// object's UID and when the walk began and ended, in Unix nanoseconds by
// the wall clock, which the replicas on one machine share. The driver
// reads the replicas' logs after a run, as an outside recorder: a walk
// holds its object's slot from its begin to its end, so two replicas'
// walks of one object must never overlap.
type walkLog struct {
	mu   sync.Mutex
	file *os.File
	w    *bufio.Writer
}

func openWalkLog(path string) (*walkLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the walk log: %w", err)
	}
	return &walkLog{file: f, w: bufio.NewWriter(f)}, nil
}

// observe is the machine's Walk observer.
func (l *walkLog) observe(_ context.Context, w fsm.Walk) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s %d %d\n", w.UID, w.Began.UnixNano(), w.Ended.UnixNano())
}

// flush writes out what the log holds, so that the driver may read it; a
// replica flushes before it answers each report.
func (l *walkLog) flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Flush()
}

func (l *walkLog) close() error {
	if err := l.flush(); err != nil {
		_ = l.file.Close()
		return err
	}
	return l.file.Close()
}

// span is one walk of an object by one replica.
type span struct {
	replica    int
	began, end time.Time
}

// readAllWalks reads the replicas' walk logs, in the order of logs.
func readAllWalks(logs []string) (map[string][]span, error) {
	walks := map[string][]span{}
	for i, path := range logs {
		if err := readWalks(path, i, walks); err != nil {
			return nil, err
		}
	}
	return walks, nil
}

// latest returns the walk that ended last.
func latest(spans []span) span {
	return slices.MaxFunc(spans, func(a, b span) int { return a.end.Compare(b.end) })
}

// readWalks reads a replica's walk log into walks, by UID.
func readWalks(path string, replica int, walks map[string][]span) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading a walk log: %w", err)
	}
	defer func() { _ = f.Close() }()
	return parseWalks(f, replica, walks)
}

func parseWalks(r io.Reader, replica int, walks map[string][]span) error {
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		uid, s, err := parseWalk(sc.Text(), line)
		if err != nil {
			return err
		}
		s.replica = replica
		walks[uid] = append(walks[uid], s)
	}
	return sc.Err()
}

// parseWalk reads line n of a walk log.
func parseWalk(text string, n int) (string, span, error) {
	f := strings.Fields(text)
	if len(f) != 3 {
		return "", span{}, fmt.Errorf("walk log line %d: want a UID and two times, got %q", n, text)
	}
	began, err1 := strconv.ParseInt(f[1], 10, 64)
	ended, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || ended < began {
		return "", span{}, fmt.Errorf("walk log line %d: not a walk: %q", n, text)
	}
	return f[0], span{began: time.Unix(0, began), end: time.Unix(0, ended)}, nil
}

// overlapping counts the objects that two replicas walked at once.
func overlapping(walks map[string][]span) int {
	n := 0
	for _, spans := range walks {
		slices.SortFunc(spans, func(a, b span) int { return a.began.Compare(b.began) })
		var end time.Time // the latest end so far, and whose it is
		owner := -1
		for _, s := range spans {
			if owner >= 0 && owner != s.replica && s.began.Before(end) {
				n++
				break
			}
			if s.end.After(end) {
				end, owner = s.end, s.replica
			}
		}
	}
	return n
}

// handoverResult is what the replicas did when one of them was killed.
type handoverResult struct {
	moved int // the killed replica's objects
	// again are the times from the kill until each moved object's first
	// walk by another replica ended, sorted; missing counts the moved
	// objects that no other replica walked.
	again   []time.Duration
	missing int
	// overlaps counts the objects walked by two replicas at once, over
	// the whole run.
	overlaps int
	// reads and writes are the survivors' requests from the kill until
	// they were quiet, by "verb resource", their Leases' apart.
	reads, writes, leases map[string]int
}

// handOver kills the last of the run's replicas once all are quiet, waits
// until the others have walked each of its objects and are quiet again,
// and reads from the walk logs how long that took and whether two
// replicas ever walked an object at once.
func (d *driver) handOver(ctx context.Context, ps []*process, logs []string) (h handoverResult, err error) {
	before := make([]report, len(ps))
	for i, p := range ps {
		if before[i], err = p.settle(ctx, 0, d.plan.timeout); err != nil {
			return h, fmt.Errorf("replica %d before the kill: %w", i+1, err)
		}
	}
	// The victim's objects are those whose latest walk was its own: the
	// replicas may have passed slots among them while they started.
	victim := len(ps) - 1
	walks, err := readAllWalks(logs)
	if err != nil {
		return h, err
	}
	var owned []string
	for uid, spans := range walks {
		if latest(spans).replica == victim {
			owned = append(owned, uid)
		}
	}
	h.moved = len(owned)
	ps[victim].kill()
	killed := time.Now()
	survivors := ps[:victim]
	if err := awaitWalks(ctx, survivors, logs[:victim], owned, killed, d.plan.timeout); err != nil {
		return h, fmt.Errorf("after the kill: %w", err)
	}
	for i, p := range survivors {
		if _, err := p.settle(ctx, 0, d.plan.timeout); err != nil {
			return h, fmt.Errorf("replica %d after the kill: %w", i+1, err)
		}
	}
	h.reads, h.writes, h.leases = map[string]int{}, map[string]int{}, map[string]int{}
	for i, p := range survivors {
		after, err := p.report()
		if err != nil {
			return h, fmt.Errorf("replica %d after the kill: %w", i+1, err)
		}
		objects, _ := split(subtract(after.Requests, before[i].Requests))
		for k, v := range objects {
			switch verb, resource, _ := strings.Cut(k, " "); {
			case resource == "leases":
				h.leases[k] += v
			case verb == "get":
				h.reads[k] += v
			default:
				h.writes[k] += v
			}
		}
	}
	if walks, err = readAllWalks(logs); err != nil {
		return h, err
	}
	for _, uid := range owned {
		first := time.Duration(-1)
		for _, s := range walks[uid] {
			if s.began.After(killed) && (first < 0 || s.end.Sub(killed) < first) {
				first = s.end.Sub(killed)
			}
		}
		if first < 0 {
			h.missing++
			continue
		}
		h.again = append(h.again, first)
	}
	slices.Sort(h.again)
	h.overlaps = overlapping(walks)
	return h, nil
}

// awaitWalks waits until the processes, whose walk logs are logs, have
// between them walked every object of uids since the moment since, or
// until the timeout: the reconciles that a hand-over starts before the cache has
// listed the objects handed over end without a walk, and a list of many
// objects can keep a replica without a request or a reconcile for long.
func awaitWalks(ctx context.Context, ps []*process, logs []string, uids []string, since time.Time, timeout time.Duration) error {
	pending := make(map[string]bool, len(uids))
	for _, uid := range uids {
		pending[uid] = true
	}
	tails := make([]walkTail, len(logs))
	for i, path := range logs {
		tails[i].path = path
	}
	deadline := time.After(timeout)
	for len(pending) > 0 {
		for i, p := range ps {
			if _, err := p.report(); err != nil { // which flushes its log
				return err
			}
			err := tails[i].read(func(uid string, s span) {
				if s.began.After(since) {
					delete(pending, uid)
				}
			})
			if err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return nil // the walks missing are counted
		case <-time.After(pollEvery):
		}
	}
	return nil
}

// walkTail reads a walk log as it grows, a whole line at a time.
type walkTail struct {
	path string
	off  int64
	line int
}

// read calls walk for each whole line written since the last read.
func (t *walkTail) read(walk func(uid string, s span)) error {
	f, err := os.Open(t.path)
	if err != nil {
		return fmt.Errorf("reading a walk log: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.NewSectionReader(f, t.off, 1<<62))
	if err != nil {
		return fmt.Errorf("reading a walk log: %w", err)
	}
	end := strings.LastIndexByte(string(data), '\n') + 1
	for line := range strings.Lines(string(data[:end])) {
		t.line++
		uid, s, err := parseWalk(line, t.line)
		if err != nil {
			return err
		}
		walk(uid, s)
	}
	t.off += int64(end)
	return nil
}

// printHandover prints what a hand-over measured.
func printHandover(out io.Writer, h handoverResult) {
	if h.moved == 0 {
		return
	}
	fmt.Fprintf(out, "    hand-over: killed the last replica, holding %d Gadgets; the others reconciled them again within %s (p50 %s), %d not at all; %d Gadgets reconciled by two replicas at once; meanwhile writes %s (%.3f per Gadget moved), reads %s (%.3f per Gadget moved), and of Leases %s\n",
		h.moved, seconds(h.last()), seconds(h.p50()), h.missing, h.overlaps,
		counts(h.writes), float64(total(h.writes))/float64(h.moved), counts(h.reads), float64(total(h.reads))/float64(h.moved), counts(h.leases))
}

func (h handoverResult) last() time.Duration {
	if len(h.again) == 0 {
		return 0
	}
	return h.again[len(h.again)-1]
}

func (h handoverResult) p50() time.Duration {
	if len(h.again) == 0 {
		return 0
	}
	return h.again[(len(h.again)-1)/2]
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func total(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}
