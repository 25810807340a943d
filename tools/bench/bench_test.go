package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWalksOfTwoReplicasAtOnceAreCounted(t *testing.T) {
	logs := []string{
		// replica 0: a from 100 to 200, b from 100 to 150, c from 100 to 200
		"a 100 200\nb 100 150\nc 100 200\n",
		// replica 1: a from 150 (within 0's walk), b from 150 (as 0's
		// ended), c twice after 0's, its own walks overlapping
		"a 150 300\nb 150 160\nc 300 400\nc 350 420\n",
	}
	walks := map[string][]span{}
	for i, l := range logs {
		if err := parseWalks(strings.NewReader(l), i, walks); err != nil {
			t.Fatal(err)
		}
	}
	if got := overlapping(walks); got != 1 {
		t.Errorf("overlapping = %d, want 1 (a alone)", got)
	}
	if got := latest(walks["c"]); got.replica != 1 || !got.end.Equal(time.Unix(0, 420)) {
		t.Errorf("latest walk of c = %+v, want replica 1's that ended at 420", got)
	}
}

func TestAWalkLogLineThatIsNoWalkIsRefused(t *testing.T) {
	for _, line := range []string{"a 100\n", "a 200 100\n", "a x 100\n"} {
		if err := parseWalks(strings.NewReader(line), 0, map[string][]span{}); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("parseWalks(%q) = %v, want an error that names line 1", line, err)
		}
	}
}

func TestARunWhoseCleanupAloneFailedIsMeasured(t *testing.T) {
	cleanup := cleanupError{errors.New("deleting the gadgets: stream error")}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, true},
		{cleanup, true},
		{fmt.Errorf("kfsm-n100000-w8-r1: %w", cleanup), true},
		{errors.New("converging: not all were Ready"), false},
	} {
		if got := measured(c.err); got != c.want {
			t.Errorf("measured(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}

func TestAWalkLogIsReadAWholeLineAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "walks")
	write := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	tail := walkTail{path: path}
	var seen []string
	read := func() {
		t.Helper()
		if err := tail.read(func(uid string, _ span) { seen = append(seen, uid) }); err != nil {
			t.Fatal(err)
		}
	}
	write("a 1 2\nb 3")
	read()
	write(" 4\nc 5 6\n")
	read()
	read()
	if want := []string{"a", "b", "c"}; !slices.Equal(seen, want) {
		t.Errorf("read %v, want %v: each walk once, a line cut short read when whole", seen, want)
	}
	write("d 7\n")
	if err := tail.read(func(string, span) {}); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("a bad fourth line: got %v, want an error that names line 4", err)
	}
}

func TestAHandOverIsPrintedWithItsRequestsPerObjectMoved(t *testing.T) {
	var out strings.Builder
	printHandover(&out, handoverResult{
		moved: 4, again: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 9 * time.Second},
		reads:  map[string]int{"get gadgets": 4},
		writes: map[string]int{},
		leases: map[string]int{"patch leases": 7},
	})
	for _, want := range []string{"holding 4 Gadgets", "within 9.00 s (p50 2.00 s)", "writes none (0.000 per Gadget moved)", "reads get gadgets 4 (1.000 per Gadget moved)", "of Leases patch leases 7"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the hand-over's line lacks %q:\n%s", want, out.String())
		}
	}
}

func TestOnlyThePlansLastSettingAndRoundIsFinal(t *testing.T) {
	p := &plan{sizes: []int{1000, 3000}, workers: []int{1, 8}, rounds: 2}
	var finals []string
	for _, n := range p.sizes {
		for _, w := range p.workers {
			for round := 1; round <= p.rounds; round++ {
				if p.final(n, w, round) {
					finals = append(finals, fmt.Sprint(n, w, round))
				}
			}
		}
	}
	if want := []string{"3000 8 2"}; !slices.Equal(finals, want) {
		t.Errorf("final settings = %q, want %q", finals, want)
	}
}
