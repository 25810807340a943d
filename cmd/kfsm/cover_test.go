package main

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/graph"
	"github.com/kfsm/kfsm/internal/coverage"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files")

// coverProfiles are what two test packages wrote: the unit tests count the
// moose's exits and the door's, the end-to-end tests the moose's timeout and
// deletion. Merged, the moose misses two of its nine edges.
var coverProfiles = []string{"testdata/cover_unit.profile", "testdata/cover_e2e.profile"}

func TestCoverMatchesGoldenFiles(t *testing.T) {
	cases := map[string]struct {
		args   []string
		golden string
	}{
		"Summary": {golden: "cover_summary.golden"},
		"Mermaid": {args: []string{"-o", "mermaid"}, golden: "cover_mermaid.golden"},
		"DOT":     {args: []string{"-o", "dot"}, golden: "cover_dot.golden"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(t.Context(), &out, append(append([]string{"cover"}, tc.args...), coverProfiles...)...); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.golden)
			if *updateGolden {
				if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/kfsm -run TestCover -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), out.String()); diff != "" {
				t.Errorf("%s (-golden +got):\n%s", path, diff)
			}
		})
	}
}

func TestCover(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.profile")
	if err := os.WriteFile(bad, []byte("{\"kfsmCoverage\":1}\nmode: set\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Version 2 of the door, covered, and version 1, which a test kept to
	// migrate from, not.
	versions := []string{filepath.Join(dir, "two.profile"), filepath.Join(dir, "one.profile")}
	for i, doc := range []string{
		`{"machine":"door","graph":{"name":"door","version":2,"mode":"Pipeline","states":[{"name":"Closed","initial":true},{"name":"Open","final":true}],"edges":[{"from":"Closed","to":"Open","kind":"exit","priority":1}]}}` + "\n" +
			`{"machine":"door","from":"Closed","to":"Open","kind":"exit","taken":2}`,
		`{"machine":"door","graph":{"name":"door","mode":"Pipeline","states":[{"name":"Shut","initial":true},{"name":"Open","final":true}],"edges":[{"from":"Shut","to":"Open","kind":"exit","priority":1}]}}`,
	} {
		if err := os.WriteFile(versions[i], []byte("{\"kfsmCoverage\":1}\n"+doc+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]struct {
		reason   string
		args     []string
		want     string   // the output, when the command succeeds
		wantErr  error    // an error that the command's error wraps
		mentions []string // what the command's error names
		omits    []string // what it does not
	}{
		"OneMachine": {
			reason: "--machine restricts the report",
			args:   append([]string{"--machine", "door"}, coverProfiles...),
			want:   "machine door: 1/1 edges covered\n",
		},
		"OneProfile": {
			reason: "a profile alone reports its own counts",
			args:   []string{"--machine", "moose", coverProfiles[1]},
			want:   "machine moose: 4/9 edges covered; never taken: Roaming→Eating, Roaming→Sleeping, Eating→Sleeping, Eating→Lost (retries), Sleeping→Roaming\n",
		},
		"OverTheMinimum": {
			reason: "7/9 is over 70%",
			args:   append([]string{"--min", "70", "--machine", "door"}, coverProfiles...),
			want:   "machine door: 1/1 edges covered\n",
		},
		"UnderTheMinimum": {
			reason:   "7/9 is under 80%; the error names the machine under it, not the one over",
			args:     append([]string{"--min", "80"}, coverProfiles...),
			mentions: []string{"moose 77.8% (7/9)"},
			omits:    []string{"door"},
		},
		"ASupersededVersion": {
			reason: "an earlier version of the door's graph, not covered, is left out of the minimum, and each line says its version",
			args:   append([]string{"--min", "100"}, versions...),
			want:   "machine door, graph version 2 (current): 1/1 edges covered\nmachine door, graph version 1 (superseded by version 2): 0/1 edges covered; never taken: Shut→Open\n",
		},
		"EveryVersionOfAMachine": {
			reason: "--machine reports every graph version of the machine, whatever order the profiles came in",
			args:   append([]string{"--machine", "door"}, versions[1], versions[0]),
			want:   "machine door, graph version 2 (current): 1/1 edges covered\nmachine door, graph version 1 (superseded by version 2): 0/1 edges covered; never taken: Shut→Open\n",
		},
		"OneVersionByItsNumber": {
			reason: "--machine with the number that the profiles keep a graph under reports that graph alone",
			args:   append([]string{"--machine", "door#2"}, versions...),
			want:   "machine door, graph version 1 (superseded by version 2): 0/1 edges covered; never taken: Shut→Open\n",
		},
		"MissingFile": {
			reason:   "a profile that is not there is an error, not an empty profile",
			args:     []string{"testdata/cover_missing.profile"},
			wantErr:  fs.ErrNotExist,
			mentions: []string{"cover_missing.profile"},
		},
		"MalformedProfile": {
			reason:   "the error names the file and the line",
			args:     []string{bad},
			mentions: []string{bad, "line 2"},
		},
		"UnknownMachine": {
			reason:   "the error lists the machines there are",
			args:     append([]string{"--machine", "elk"}, coverProfiles...),
			mentions: []string{`"elk"`, "door, moose"},
		},
		"UnknownOutput": {
			reason:   "the error lists the outputs there are",
			args:     append([]string{"-o", "svg"}, coverProfiles...),
			mentions: []string{`"svg"`, "summary, mermaid, dot"},
		},
		"MinimumOutOfRange": {
			reason:   "a minimum is a percentage",
			args:     append([]string{"--min", "800"}, coverProfiles...),
			mentions: []string{"800"},
		},
		"NoProfile": {
			reason:   "cover reads at least one profile",
			args:     nil,
			mentions: []string{"at least 1 arg"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), &out, append([]string{"cover"}, tc.args...)...)
			if tc.mentions == nil {
				if err != nil {
					t.Fatalf("%s\nkfsm cover = %v", tc.reason, err)
				}
				if diff := cmp.Diff(tc.want, out.String()); diff != "" {
					t.Errorf("%s\noutput (-want +got):\n%s", tc.reason, diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s\nkfsm cover succeeded, want an error", tc.reason)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("%s\nkfsm cover = %v, want an error wrapping %v", tc.reason, err, tc.wantErr)
			}
			for _, m := range tc.mentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("%s\nkfsm cover = %q, want it to mention %q", tc.reason, err, m)
				}
			}
			for _, m := range tc.omits {
				if strings.Contains(err.Error(), m) {
					t.Errorf("%s\nkfsm cover = %q, want it not to mention %q", tc.reason, err, m)
				}
			}
		})
	}
}

// Names in a profile reach the terminal with their control characters
// escaped, whatever the output.
func TestCoverPrintsNoControlCharacter(t *testing.T) {
	roaming, lost := graph.State("Roaming"+hostile), graph.State("Lost"+hostile)
	g := &graph.Graph{Name: "evil" + hostile, Mode: graph.Lifecycle, States: []graph.StateSpec{
		{Name: roaming, Initial: true, Exits: []graph.State{lost}, Timeout: &graph.Timeout{After: time.Minute, To: lost}},
		{Name: lost, Final: true},
	}}
	// Machine names are DNS labels, with no newline: cover finds a
	// machine's summary line by its name.
	machine := "evil" + strings.NewReplacer("\r", "", "\n", "").Replace(hostile)
	p := coverage.New()
	if err := p.AddMachine(machine, g); err != nil {
		t.Fatal(err)
	}
	p.Take(machine, graph.EdgeKey{From: roaming, To: lost, Kind: graph.Exit.String()})
	path := filepath.Join(t.TempDir(), "evil.profile")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, output := range coverOutputs() {
		var out bytes.Buffer
		if err := run(t.Context(), &out, "cover", "-o", output, path); err != nil {
			t.Fatal(err)
		}
		assertPrintable(t, "kfsm cover -o "+output, out.String())
		if !strings.Contains(out.String(), "pwned") {
			t.Errorf("kfsm cover -o %s does not show the text it escaped:\n%s", output, &out)
		}
	}
}
