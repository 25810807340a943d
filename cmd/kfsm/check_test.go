package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/graph"
)

func TestCheckFindsNothingInTheExamples(t *testing.T) {
	var out bytes.Buffer
	start := time.Now()
	if err := run(t.Context(), &out, "check", "--goal", "database=End", "../../examples/..."); err != nil {
		t.Fatalf("kfsm check on the examples: %v\n%s", err, &out)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("kfsm check on the examples took %v", d)
	}
	want := []string{
		"../../examples/autoupdate/autoupdate.graph.lock.json: machine autoupdate, version 1: ok",
		"../../examples/database/database.graph.lock.json: machine database, version 1: ok",
		"../../examples/moose/moose.graph.lock.json: machine moose, version 1: ok",
		"../../examples/webapp/webapp.graph.lock.json: machine webapp, version 2: ok",
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(out.String()), "\n")); diff != "" {
		t.Errorf("kfsm check on the examples (-want +got):\n%s", diff)
	}
}

// The database example cannot start Running again once it is Stopping:
// asked for that goal, check says so, and fails.
func TestCheckFindsTheGoalThatTheDatabaseCannotReach(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), &out, "check", "--goal", "database=Running", "../../examples/database")
	if err == nil || err.Error() != "found 1 problem in 1 machine of 1" {
		t.Errorf("kfsm check = %v, want it to fail with 1 problem", err)
	}
	for _, want := range []string{
		"machine database, version 1: 1 problem\n",
		"  GoalUnreachable: goal Running cannot be reached through the declared exits from Stopping",
		"\n    Start -> Running -> Stopping\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("kfsm check printed\n%s\nwithout %q", &out, want)
		}
	}
}

// writeLock writes g's lock file into dir, which it makes.
func writeLock(t *testing.T, dir string, g *graph.Graph) {
	t.Helper()
	l := &graph.Lock{Machine: g.Name, Graphs: map[int]*graph.Graph{max(g.Version, 1): g}}
	data, err := l.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, graph.LockFile(g.Name)), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// stuck writes the lock files of three machines into a new directory and
// returns it: a job that can park for ever, a volume whose deletion can
// stay detaching, and a sync that its timers send round for ever.
func stuck(t *testing.T) string {
	dir := t.TempDir()
	writeLock(t, filepath.Join(dir, "job"), &graph.Graph{Name: "job", States: []graph.StateSpec{
		{Name: "Queued", Initial: true, Exits: []graph.State{"Running"}},
		{Name: "Running", Exits: []graph.State{"Succeeded", "Parked"}},
		{Name: "Parked", Exits: []graph.State{"Unparked"}},
		{Name: "Unparked", Exits: []graph.State{"Parked"}},
		{Name: "Succeeded", Final: true},
	}})
	writeLock(t, filepath.Join(dir, "volume"), &graph.Graph{Name: "volume", Version: 2, States: []graph.StateSpec{
		{Name: "Active", Initial: true, Exits: []graph.State{"Active"}},
		{Name: "Draining", OnDelete: true, Exits: []graph.State{"Detaching", "Removed"}},
		{Name: "Detaching", Exits: []graph.State{"Orphaned"}},
		{Name: "Orphaned", Exits: []graph.State{"Detaching"}},
		{Name: "Removed", Final: true},
	}})
	writeLock(t, filepath.Join(dir, "sync"), &graph.Graph{Name: "sync", States: []graph.StateSpec{
		{Name: "Start", Initial: true, Exits: []graph.State{"Syncing"}},
		{Name: "Syncing", Exits: []graph.State{"Synced"}, Timeout: &graph.Timeout{After: 5 * time.Minute, To: "Backoff"}},
		{Name: "Backoff", Exits: []graph.State{"Synced"}, Timeout: &graph.Timeout{After: time.Minute, To: "Syncing"}},
		{Name: "Synced", Exits: []graph.State{"Syncing"}},
	}})
	return dir
}

func TestCheckReportsEachProblemWithItsWalk(t *testing.T) {
	dir := stuck(t)
	var out bytes.Buffer
	err := run(t.Context(), &out, "check", dir+"/...")
	if err == nil || err.Error() != "found 3 problems in 3 machines of 3" {
		t.Errorf("kfsm check = %v, want it to fail with 3 problems", err)
	}
	want := strings.Join([]string{
		filepath.Join(dir, "job", "job.graph.lock.json") + ": machine job, version 1: 1 problem",
		"  Trap: states Parked, Unparked are a trap: objects can finish, in Succeeded, but an object that reaches them never does: no walk from there leads to a final state",
		"    Queued -> Running -> Parked, then for ever: Parked -> Unparked -> Parked",
		filepath.Join(dir, "sync", "sync.graph.lock.json") + ": machine sync, version 1: 1 problem",
		"  UnboundedCycle: kfsm can go round Syncing -> Backoff -> Syncing for ever by itself: every step is a timeout or retries edge, which kfsm takes without a handler's Next or a change of the object",
		"    Start -> Syncing, then for ever: Syncing -> Backoff -> Syncing",
		filepath.Join(dir, "volume", "volume.graph.lock.json") + ": machine volume, version 2: 1 problem",
		"  DeletionTrap: the deletion path can reach Detaching, Orphaned and never leave them for a final state: the finalizer of an object deleted there would never be removed",
		"    on delete -> Draining -> Detaching, then for ever: Detaching -> Orphaned -> Detaching",
	}, "\n") + "\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("kfsm check (-want +got):\n%s", diff)
	}
}

func TestCheckDrawsAndWritesTheWalk(t *testing.T) {
	dir := stuck(t)
	var out bytes.Buffer
	if err := run(t.Context(), &out, "check", "--mermaid", "--scenario", filepath.Join(dir, "sync")); err == nil {
		t.Fatalf("kfsm check passed the sync machine:\n%s", &out)
	}
	for _, want := range []string{
		"%% machine sync: UnboundedCycle\nstateDiagram-v2\n",
		"    s1 --> s2: step 2, timeout 5m\n",
		"    class s1,s2 problem\n",
		"// The scenarios of machine sync's problems, to complete as tests:\npackage sync_test\n",
		"func TestSyncUnboundedCycleSyncing(t *testing.T) {\n",
		"\te.Clock.Step(5 * time.Minute)\n\te.AwaitState(obj, \"Backoff\")\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("kfsm check --mermaid --scenario printed\n%s\nwithout %q", &out, want)
		}
	}
}

func TestCheckListsTheProblemsOfAnInvalidGraph(t *testing.T) {
	dir := t.TempDir()
	writeLock(t, dir, &graph.Graph{Name: "door", States: []graph.StateSpec{
		{Name: "Closed", Initial: true, Exits: []graph.State{"Open"}},
		{Name: "Open"},
	}})
	var out bytes.Buffer
	if err := run(t.Context(), &out, "check", dir); err == nil {
		t.Fatalf("kfsm check passed an invalid graph:\n%s", &out)
	}
	want := ": machine door, version 1: 1 problem, not model-checked\n  NoExit: state Open is not final and has no exit: objects would stay there for ever\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("kfsm check printed\n%s\nwant it to end with\n%s", &out, want)
	}
}

func TestCheckFindsTheLockFilesThatPathsName(t *testing.T) {
	dir := stuck(t)
	// Where go ./... does not look, nor does check.
	lock, err := os.ReadFile(filepath.Join(dir, "job", "job.graph.lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, skipped := range []string{"vendor", "testdata", ".git", "_old"} {
		if err := os.MkdirAll(filepath.Join(dir, "job", skipped), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "job", skipped, "job.graph.lock.json"), lock, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]struct {
		paths    []string
		machines []string
	}{
		"Recursive":  {paths: []string{dir + "/..."}, machines: []string{"job", "sync", "volume"}},
		"Directory":  {paths: []string{filepath.Join(dir, "job")}, machines: []string{"job"}},
		"NotBelow":   {paths: []string{dir}},
		"LockFile":   {paths: []string{filepath.Join(dir, "sync", "sync.graph.lock.json")}, machines: []string{"sync"}},
		"Overlap":    {paths: []string{filepath.Join(dir, "volume"), dir + "/..."}, machines: []string{"job", "sync", "volume"}},
		"Default":    {machines: []string{"job", "sync", "volume"}},
		"DotPattern": {paths: []string{"./job/..."}, machines: []string{"job"}},
	}
	t.Chdir(dir)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), &out, append([]string{"check"}, c.paths...)...)
			var machines []string
			for _, l := range strings.Split(out.String(), "\n") {
				if _, rest, ok := strings.Cut(l, ": machine "); ok {
					machines = append(machines, strings.Split(rest, ",")[0])
				}
			}
			if diff := cmp.Diff(c.machines, machines); diff != "" {
				t.Errorf("kfsm check %s checked (-want +got):\n%s", strings.Join(c.paths, " "), diff)
			}
			if len(c.machines) == 0 && (err == nil || !strings.Contains(err.Error(), "no lock files (NAME.graph.lock.json) under")) {
				t.Errorf("kfsm check with no lock file = %v, want it to say so", err)
			}
		})
	}
}

func TestCheckRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad", "bad.graph.lock.json")
	empty := filepath.Join(dir, "empty", "empty.graph.lock.json")
	for file, data := range map[string]string{bad: `{"machine": "bad", "graphs": {"1": {"mode": "Sideways"}}}`, empty: "{}"} {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeLock(t, filepath.Join(dir, "job"), &graph.Graph{Name: "job", States: []graph.StateSpec{{Name: "Done", Initial: true, Final: true}}})
	cases := map[string]struct {
		args []string
		want []string
	}{
		"MalformedLock":  {args: []string{filepath.Dir(bad)}, want: []string{bad + ": graph lock: version 1: graph JSON: unknown mode \"Sideways\""}},
		"EmptyLock":      {args: []string{filepath.Dir(empty)}, want: []string{empty + ": the lock holds no graph"}},
		"Missing":        {args: []string{filepath.Join(dir, "nowhere")}, want: []string{"nowhere", "no such file or directory"}},
		"GoalWithoutEq":  {args: []string{"--goal", "job", dir + "/job"}, want: []string{`--goal "job": want machine=State`}},
		"GoalOfNoLock":   {args: []string{"--goal", "moose=Roaming", dir + "/job"}, want: []string{"no lock file of machine moose was found; the machines are job"}},
		"FileNotAnyLock": {args: []string{filepath.Join(dir, "job", "notes.txt")}, want: []string{"notes.txt is neither a directory nor a lock file"}},
	}
	if err := os.WriteFile(filepath.Join(dir, "job", "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := run(t.Context(), &bytes.Buffer{}, append([]string{"check"}, c.args...)...)
			if err == nil {
				t.Fatalf("kfsm check %s passed", c.args)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("kfsm check %s = %q, want it to say %q", c.args, err, w)
				}
			}
		})
	}
}

// States named to take over the terminal print as escapes.
func TestCheckPrintsNoControlCharacter(t *testing.T) {
	dir := t.TempDir()
	writeLock(t, dir, &graph.Graph{Name: "evil" + hostile, States: []graph.StateSpec{
		{Name: "Start", Initial: true, Exits: []graph.State{graph.State("Loop" + hostile)}, Timeout: &graph.Timeout{After: time.Minute, To: graph.State("Loop" + hostile)}},
		{Name: graph.State("Loop" + hostile), Timeout: &graph.Timeout{After: time.Minute, To: "Start"}},
	}})
	var out bytes.Buffer
	if err := run(t.Context(), &out, "check", "--mermaid", "--scenario", dir); err == nil {
		t.Fatalf("kfsm check passed a trap:\n%s", &out)
	}
	if !strings.Contains(out.String(), "Trap: ") {
		t.Errorf("kfsm check did not report the trap:\n%s", &out)
	}
	assertPrintable(t, "kfsm check", out.String())
}
