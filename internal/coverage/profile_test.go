package coverage

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/graph"
)

// mooseGraph has every kind of coverage edge: exits, a timeout, retries
// and the deletion entry.
func mooseGraph() *graph.Graph {
	return &graph.Graph{Name: "moose", States: []graph.StateSpec{
		{Name: "Tagged", Initial: true, Exits: []graph.State{"Roaming"}},
		{Name: "Roaming", Exits: []graph.State{"Eating", "Sleeping"}, Timeout: &graph.Timeout{After: 30 * time.Minute, To: "Lost"}},
		{Name: "Eating", Exits: []graph.State{"Sleeping"}, Retries: &graph.Retries{Limit: 3, To: "Lost"}},
		{Name: "Sleeping", Exits: []graph.State{"Roaming"}},
		{Name: "Lost", Final: true},
		{Name: "Releasing", OnDelete: true, Exits: []graph.State{"Released"}},
		{Name: "Released", Final: true},
	}}
}

func doorGraph() *graph.Graph {
	return &graph.Graph{Name: "door", Mode: graph.Pipeline, States: []graph.StateSpec{
		{Name: "Closed", Initial: true, Exits: []graph.State{"Open"}},
		{Name: "Open", Final: true},
	}}
}

func exitKey(from, to graph.State) graph.EdgeKey {
	return graph.EdgeKey{From: from, To: to, Kind: graph.Exit.String()}
}

var (
	mooseTimeout  = graph.EdgeKey{From: "Roaming", To: "Lost", Kind: graph.TimeoutExit.String()}
	mooseRetries  = graph.EdgeKey{From: "Eating", To: "Lost", Kind: graph.RetriesExit.String()}
	mooseOnDelete = graph.EdgeKey{To: "Releasing", Kind: graph.DeleteEntry}
)

// takenProfile declares the moose and door machines and takes the edges given.
func takenProfile(t *testing.T, takes map[string][]graph.EdgeKey) *Profile {
	t.Helper()
	p := New()
	graphs := map[string]*graph.Graph{"moose": mooseGraph(), "door": doorGraph()}
	for name, edges := range takes {
		if err := p.AddMachine(name, graphs[name]); err != nil {
			t.Fatal(err)
		}
		for _, e := range edges {
			if !p.Take(name, e) {
				t.Fatalf("Take(%s, %+v) = false", name, e)
			}
		}
	}
	return p
}

func profileText(t *testing.T, p *Profile) string {
	t.Helper()
	var b strings.Builder
	n, err := p.WriteTo(&b)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(b.Len()) {
		t.Errorf("WriteTo() = %d, but wrote %d bytes", n, b.Len())
	}
	return b.String()
}

func TestProfileWritesTheDocumentedFormat(t *testing.T) {
	p := takenProfile(t, map[string][]graph.EdgeKey{"door": {exitKey("Closed", "Open"), exitKey("Closed", "Open")}})
	want := `{"kfsmCoverage":1}
{"machine":"door","graph":{"name":"door","mode":"Pipeline","states":[{"name":"Closed","initial":true},{"name":"Open","final":true}],"edges":[{"from":"Closed","to":"Open","kind":"exit","priority":1}]}}
{"machine":"door","from":"Closed","to":"Open","kind":"exit","taken":2}
`
	if diff := cmp.Diff(want, profileText(t, p)); diff != "" {
		t.Errorf("WriteTo() (-want +got):\n%s", diff)
	}
}

func TestProfileRoundTrip(t *testing.T) {
	p := takenProfile(t, map[string][]graph.EdgeKey{
		"moose": {exitKey("Tagged", "Roaming"), exitKey("Roaming", "Eating"), exitKey("Roaming", "Eating"), mooseTimeout, mooseOnDelete},
		"door":  {exitKey("Closed", "Open")},
	})
	written := profileText(t, p)
	got, err := Read(strings.NewReader(written))
	if err != nil {
		t.Fatalf("Read(WriteTo()) = %v\n%s", err, written)
	}
	if diff := cmp.Diff([]string{"door", "moose"}, got.Machines()); diff != "" {
		t.Errorf("Machines() (-want +got):\n%s", diff)
	}
	for _, m := range p.Machines() {
		if diff := cmp.Diff(p.Taken(m), got.Taken(m)); diff != "" {
			t.Errorf("Taken(%s) after a round trip (-want +got):\n%s", m, diff)
		}
		if diff := cmp.Diff(p.Graph(m).CoverageEdges(), got.Graph(m).CoverageEdges()); diff != "" {
			t.Errorf("the graph of %s after a round trip has other edges (-want +got):\n%s", m, diff)
		}
	}
	if again := profileText(t, got); again != written {
		t.Errorf("writing the profile read back differs:\n%s\nwant:\n%s", again, written)
	}
}

func TestProfilesMerge(t *testing.T) {
	a := takenProfile(t, map[string][]graph.EdgeKey{
		"moose": {exitKey("Tagged", "Roaming"), exitKey("Roaming", "Eating")},
	})
	b := takenProfile(t, map[string][]graph.EdgeKey{
		"moose": {exitKey("Tagged", "Roaming"), mooseRetries},
		"door":  {exitKey("Closed", "Open")},
	})
	wantMoose := map[graph.EdgeKey]int{
		exitKey("Tagged", "Roaming"): 2, exitKey("Roaming", "Eating"): 1, exitKey("Roaming", "Sleeping"): 0, mooseTimeout: 0,
		exitKey("Eating", "Sleeping"): 0, mooseRetries: 1, exitKey("Sleeping", "Roaming"): 0, exitKey("Releasing", "Released"): 0, mooseOnDelete: 0,
	}
	wantDoor := map[graph.EdgeKey]int{exitKey("Closed", "Open"): 1}

	merged := map[string]func() (*Profile, error){
		"Merge": func() (*Profile, error) {
			p := New()
			if err := p.Merge(a); err != nil {
				return nil, err
			}
			return p, p.Merge(b)
		},
		"ReadConcatenated": func() (*Profile, error) {
			return Read(io.MultiReader(strings.NewReader(profileText(t, a)), strings.NewReader(profileText(t, b))))
		},
	}
	for name, merge := range merged {
		t.Run(name, func(t *testing.T) {
			p, err := merge()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantMoose, p.Taken("moose")); diff != "" {
				t.Errorf("counts of a machine in both profiles are summed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantDoor, p.Taken("door")); diff != "" {
				t.Errorf("a machine in one profile is kept (-want +got):\n%s", diff)
			}
		})
	}
}

// Two packages may give one name to different machines: each graph is
// covered apart, under the name and a number.
func TestMergeKeepsAnotherGraphOfTheSameNameApart(t *testing.T) {
	p := takenProfile(t, map[string][]graph.EdgeKey{"moose": {exitKey("Tagged", "Roaming")}})
	other := New()
	if err := other.AddMachine("moose", doorGraph()); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time, the numbered one matches
		if err := p.Merge(other); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"moose", "moose#2"}, p.Machines()); diff != "" {
		t.Errorf("machines (-want +got):\n%s", diff)
	}
	if got := p.Taken("moose")[exitKey("Tagged", "Roaming")]; got != 1 {
		t.Errorf("the first moose's edge was taken %d times, want 1", got)
	}
	if taken, total := p.Covered("moose#2"); taken != 0 || total != len(doorGraph().CoverageEdges()) {
		t.Errorf("moose#2 covers %d of %d edges, want 0 of the door's %d", taken, total, len(doorGraph().CoverageEdges()))
	}

	// Read from concatenated profiles, the same.
	var both bytes.Buffer
	for _, q := range []*Profile{p, other} {
		if _, err := q.WriteTo(&both); err != nil {
			t.Fatal(err)
		}
	}
	read, err := Read(&both)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"moose", "moose#2"}, read.Machines()); diff != "" {
		t.Errorf("machines read (-want +got):\n%s", diff)
	}
}

func TestAddMachineTwice(t *testing.T) {
	p := New()
	if err := p.AddMachine("moose", mooseGraph()); err != nil {
		t.Fatal(err)
	}
	p.Take("moose", mooseTimeout)
	if err := p.AddMachine("moose", mooseGraph()); err != nil {
		t.Errorf("AddMachine() of the same graph again = %v, want nil", err)
	}
	if err := p.AddMachine("moose", doorGraph()); err == nil {
		t.Error("AddMachine() of another graph under the same name = nil, want an error")
	}
	if got := p.Taken("moose")[mooseTimeout]; got != 1 {
		t.Errorf("after AddMachine again, the timeout was taken %d times, want the 1 counted before", got)
	}
}

// An earlier version of a machine's graph, kept by a test to migrate
// from, is superseded by a later one of the same name; another machine's
// graph is not, nor is the latest version.
func TestAnEarlierGraphVersionIsSuperseded(t *testing.T) {
	p := New()
	two := mooseGraph()
	two.Version = 2
	for name, g := range map[string]*graph.Graph{"moose": two, "moose#2": mooseGraph(), "door": doorGraph()} {
		if err := p.AddMachine(name, g); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]bool{"moose": false, "moose#2": true, "door": false, "nothing": false} {
		if got := p.Superseded(name); got != want {
			t.Errorf("superseded(%s) = %v, want %v", name, got, want)
		}
	}
}

// When a profile holds several versions of a machine's graph, the
// summary labels each line with its graph version and says which one is
// current, whatever the numbers that tell the machines apart; a machine
// of one version keeps its plain name.
func TestTheSummaryLabelsGraphVersions(t *testing.T) {
	two, three := mooseGraph(), mooseGraph()
	two.Version, three.Version = 2, 3
	other := doorGraph()
	other.Name = "moose" // another package's machine of the same name, at version 1
	cases := map[string]struct {
		reason string
		graphs map[string]*graph.Graph // by the name the profile keeps them under
		want   []string                // the summary's lines, up to their colon
	}{
		"OneVersion": {
			reason: "a machine of one graph version is named alone",
			graphs: map[string]*graph.Graph{"moose": two, "door": doorGraph()},
			want:   []string{"machine door", "machine moose"},
		},
		"TheEarlierFirst": {
			reason: "the earlier version, kept first, has the plain name and the later one a number: the labels say which is which",
			graphs: map[string]*graph.Graph{"moose": mooseGraph(), "moose#2": two},
			want: []string{
				"machine moose, graph version 2 (current)",
				"machine moose, graph version 1 (superseded by version 2)",
			},
		},
		"TheLaterFirst": {
			reason: "the same versions, kept in the other order, read the same",
			graphs: map[string]*graph.Graph{"moose": two, "moose#2": mooseGraph()},
			want: []string{
				"machine moose, graph version 2 (current)",
				"machine moose, graph version 1 (superseded by version 2)",
			},
		},
		"ThreeVersions": {
			reason: "each earlier version names the current one",
			graphs: map[string]*graph.Graph{"moose": two, "moose#2": three, "moose#3": mooseGraph()},
			want: []string{
				"machine moose, graph version 3 (current)",
				"machine moose, graph version 2 (superseded by version 3)",
				"machine moose, graph version 1 (superseded by version 3)",
			},
		},
		"TwoGraphsOfOneVersion": {
			reason: "two graphs of one name and version keep their numbers, beside their version",
			graphs: map[string]*graph.Graph{"moose": two, "moose#2": mooseGraph(), "moose#3": other},
			want: []string{
				"machine moose, graph version 2 (current)",
				"machine moose#2, graph version 1 (superseded by version 2)",
				"machine moose#3, graph version 1 (superseded by version 2)",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := New()
			for name, g := range tc.graphs {
				if err := p.AddMachine(name, g); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for line := range strings.Lines(p.Summary()) {
				label, _, _ := strings.Cut(line, ":")
				got = append(got, label)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: the summary's labels (-want +got):\n%s\n%s", tc.reason, diff, p.Summary())
			}
			for name := range tc.graphs {
				if label := "machine " + p.Label(name); !slices.Contains(got, label) {
					t.Errorf("%s: Label(%q) = %q, which labels no line of the summary", tc.reason, name, label)
				}
			}
		})
	}
}

func TestTakeIgnoresWhatIsNotACoverageEdge(t *testing.T) {
	cases := map[string]struct {
		machine string
		edge    graph.EdgeKey
		want    bool
	}{
		"DeclaredExit":      {machine: "moose", edge: exitKey("Roaming", "Sleeping"), want: true},
		"DeletionEntry":     {machine: "moose", edge: mooseOnDelete, want: true},
		"UndeclaredExit":    {machine: "moose", edge: exitKey("Lost", "Roaming")},
		"WrongKind":         {machine: "moose", edge: graph.EdgeKey{From: "Roaming", To: "Lost", Kind: "retries"}},
		"UnknownMachine":    {machine: "elk", edge: exitKey("Roaming", "Sleeping")},
		"DeletionElsewhere": {machine: "moose", edge: graph.EdgeKey{To: "Lost", Kind: graph.DeleteEntry}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := takenProfile(t, map[string][]graph.EdgeKey{"moose": nil})
			if got := p.Take(tc.machine, tc.edge); got != tc.want {
				t.Errorf("Take(%s, %+v) = %v, want %v", tc.machine, tc.edge, got, tc.want)
			}
			want := 0
			if tc.want {
				want = 1
			}
			if taken, _ := p.Covered("moose"); taken != want {
				t.Errorf("Covered() = %d taken, want %d", taken, want)
			}
		})
	}
}

func TestTakeIsSafeForConcurrentUse(t *testing.T) {
	p := takenProfile(t, map[string][]graph.EdgeKey{"moose": nil})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				p.Take("moose", mooseTimeout)
				_ = p.Summary()
			}
		})
	}
	wg.Wait()
	if got := p.Taken("moose")[mooseTimeout]; got != 800 {
		t.Errorf("the timeout was taken %d times, want 800", got)
	}
}

func TestSummary(t *testing.T) {
	everyMooseEdge := mooseGraph().CoverageEdges()
	cases := map[string]struct {
		reason string
		takes  map[string][]graph.EdgeKey
		want   string
	}{
		"Partial": {
			reason: "exits show bare, other kinds in parentheses, the deletion entry as on delete",
			takes: map[string][]graph.EdgeKey{"moose": {
				exitKey("Tagged", "Roaming"), exitKey("Roaming", "Eating"), exitKey("Roaming", "Sleeping"),
				exitKey("Eating", "Sleeping"), exitKey("Sleeping", "Roaming"),
			}},
			want: "machine moose: 5/9 edges covered; never taken: Roaming→Lost (timeout), Eating→Lost (retries), Releasing→Released, on delete→Releasing\n",
		},
		"Full": {
			reason: "a fully covered machine lists nothing",
			takes:  map[string][]graph.EdgeKey{"moose": everyMooseEdge},
			want:   "machine moose: 9/9 edges covered\n",
		},
		"SortedByMachine": {
			reason: "one line per machine, by name",
			takes:  map[string][]graph.EdgeKey{"moose": everyMooseEdge, "door": nil},
			want:   "machine door: 0/1 edges covered; never taken: Closed→Open\nmachine moose: 9/9 edges covered\n",
		},
		"Empty": {
			reason: "no machine, no line",
			want:   "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, takenProfile(t, tc.takes).Summary()); diff != "" {
				t.Errorf("%s\nSummary() (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestReadNamesTheLine(t *testing.T) {
	door := profileText(t, takenProfile(t, map[string][]graph.EdgeKey{"door": nil}))
	header, graphLine, _ := strings.Cut(door, "\n")
	graphLine, _, _ = strings.Cut(graphLine, "\n")
	header += "\n"
	graphLine += "\n"
	cases := map[string]struct {
		reason  string
		profile string
		line    string // the start of the error
		names   string // another part of the error that points at the problem
	}{
		"NotJSON": {
			reason:  "a go test -coverprofile is not a kfsm profile",
			profile: "mode: set\n",
			line:    "line 1:",
			names:   "not a JSON object",
		},
		"NoFormatLine": {
			reason:  "the format line comes first",
			profile: graphLine,
			line:    "line 1:",
			names:   "kfsmCoverage",
		},
		"OtherVersion": {
			reason:  "a format this kfsm does not know is refused",
			profile: `{"kfsmCoverage":2}` + "\n",
			line:    "line 1:",
			names:   "format 2",
		},
		"EdgeBeforeGraph": {
			reason:  "counts need the graph they count on",
			profile: header + `{"machine":"door","from":"Closed","to":"Open","kind":"exit","taken":1}` + "\n",
			line:    "line 2:",
			names:   "no graph line",
		},
		"UndeclaredEdge": {
			reason:  "a count for an edge the graph lacks is from another version of the machine",
			profile: header + graphLine + "\n" + `{"machine":"door","from":"Open","to":"Closed","kind":"exit","taken":1}` + "\n",
			line:    "line 4:",
			names:   "Open→Closed",
		},
		"NegativeCount": {
			reason:  "an edge is taken zero times or more",
			profile: header + graphLine + `{"machine":"door","from":"Closed","to":"Open","kind":"exit","taken":-1}` + "\n",
			line:    "line 3:",
			names:   "-1",
		},
		"BadGraph": {
			reason:  "the graph must parse",
			profile: header + `{"machine":"door","graph":{"name":"door","mode":"Waterfall","states":[],"edges":[]}}` + "\n",
			line:    "line 2:",
			names:   "Waterfall",
		},
		"GraphWithoutMachine": {
			reason:  "a graph belongs to a machine",
			profile: header + strings.Replace(graphLine, `"machine":"door",`, "", 1),
			line:    "line 2:",
			names:   "without a machine",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, err := Read(strings.NewReader(tc.profile))
			if err == nil {
				t.Fatalf("%s\nRead() = %v, want an error", tc.reason, p.Machines())
			}
			if !strings.HasPrefix(err.Error(), tc.line) || !strings.Contains(err.Error(), tc.names) {
				t.Errorf("%s\nRead() error %q, want it to start with %q and mention %q", tc.reason, err, tc.line, tc.names)
			}
		})
	}
}

func TestReadAcceptsEmptyInput(t *testing.T) {
	p, err := Read(bytes.NewReader(nil))
	if err != nil {
		t.Fatalf("Read(empty) = %v, want an empty profile", err)
	}
	if got := p.Machines(); len(got) != 0 {
		t.Errorf("Machines() = %v, want none", got)
	}
}
