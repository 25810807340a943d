package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/graph"
)

// lockSuffix ends the name of every machine's lock file (graph.LockFile).
const lockSuffix = ".graph.lock.json"

func newCheckCommand() *cobra.Command {
	var (
		mermaid, scenario bool
		goals             []string
	)
	cmd := &cobra.Command{
		Use:   "check [flags] [paths]",
		Short: "Prove that no object can get stuck in the machines' graphs, or show the walk by which one can",
		Long: `Check finds the machines' lock files (NAME.graph.lock.json, which make
generate writes beside the package that declares each machine) under the
paths, and model-checks the newest graph of each: it treats every handler
as a choice among its declared exits, Wait, Done, Fail and Stop, adds the
moves that kfsm makes by itself (a timeout, exhausted retries, the entry
into the deletion path), and proves that no object can get stuck, or
shows how one can. It finds:

  Trap            states that an object can reach and never leave for a
                  state where it rests (a final state, or one without a
                  timeout, where Done holds it); where final states can
                  be reached, states that never lead to one
  DeletionTrap    states of the deletion path from which no final state,
                  and so no removal of the finalizer, can be reached
  UnboundedCycle  a cycle that kfsm can go round for ever by itself: of
                  timeout and retries edges only, or on the deletion path
                  with no timeout or retries edge out of it
  GoalUnreachable with --goal, the states from which the goal cannot be
                  reached through the declared exits

Each finding comes with its counterexample: the walk from the initial
state (or, for the deletion path, from the OnDelete state) to the
problem, then the loop that repeats. --mermaid draws it on the graph, its
steps numbered; --scenario writes an fsmtest test that walks it, to
complete and keep. A graph that Validate refuses is reported with its
problems and not model-checked.

Assumed: outside changes (a new spec, a changed child) drive the live side,
so a cycle of exits there is the machine at work and is not reported; a
handler may return anything its state declares. Not checked: what the
handlers do (kfsm vet reads their code), how long timeouts and backoffs
are, and the graphs of earlier versions, whose objects migrate.

The paths are directories, a lock file, or patterns like ./... for a
directory and those below it (vendor, testdata and hidden directories are
skipped); the default is ./... Check exits with status 1 when it finds a
problem, and names the file of a lock it cannot read.`,
		Example: `  kfsm check ./...
  kfsm check --goal database=End ./examples/...
  kfsm check --mermaid --scenario ./internal/controller`,
		RunE: func(cmd *cobra.Command, paths []string) error {
			if len(paths) == 0 {
				paths = []string{"./..."}
			}
			byMachine, err := parseGoals(goals)
			if err != nil {
				return err
			}
			return check(cmd.OutOrStdout(), paths, byMachine, checkOutput{mermaid: mermaid, scenario: scenario})
		},
	}
	cmd.Flags().BoolVar(&mermaid, "mermaid", false, "draw each finding's walk on its graph, in Mermaid")
	cmd.Flags().BoolVar(&scenario, "scenario", false, "write, for each machine with findings, an fsmtest test that walks each")
	cmd.Flags().StringArrayVar(&goals, "goal", nil, "a goal that machine's Goal may ask for, as machine=State; repeat it for more")
	return cmd
}

// parseGoals reads --goal's values, machine=State, into the goals of each
// machine.
func parseGoals(values []string) (map[string][]graph.State, error) {
	goals := map[string][]graph.State{}
	for _, v := range values {
		machine, state, ok := strings.Cut(v, "=")
		if !ok || machine == "" || state == "" {
			return nil, fmt.Errorf("--goal %q: want machine=State, such as database=Running", v)
		}
		goals[machine] = append(goals[machine], graph.State(state))
	}
	return goals, nil
}

// checkOutput says what check prints besides each finding in words.
type checkOutput struct {
	mermaid, scenario bool
}

// lock is a machine's lock file and the newest graph it keeps.
type lock struct {
	file  string
	graph *graph.Graph
}

// check model-checks the newest graph of each lock file under paths and
// prints what it finds; it fails when it finds a problem.
func check(out io.Writer, paths []string, goals map[string][]graph.State, o checkOutput) error {
	files, err := lockFiles(paths)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no lock files (NAME%s) under %s", lockSuffix, strings.Join(paths, " "))
	}
	var locks []lock
	machines := map[string]bool{}
	for _, file := range files {
		g, err := newestGraph(file)
		if err != nil {
			return err
		}
		locks = append(locks, lock{file: file, graph: g})
		machines[g.Name] = true
	}
	for _, m := range slices.Sorted(maps.Keys(goals)) {
		if !machines[m] {
			return fmt.Errorf("--goal %s=...: no lock file of machine %s was found; the machines are %s",
				terminal.Line(m), terminal.Line(m), terminal.Line(strings.Join(slices.Sorted(maps.Keys(machines)), ", ")))
		}
	}
	findings, failed := 0, 0
	for _, l := range locks {
		n, err := printCheck(out, l, goals[l.graph.Name], o)
		if err != nil {
			return err
		}
		if n > 0 {
			findings += n
			failed++
		}
	}
	if findings == 0 {
		return nil
	}
	return fmt.Errorf("found %s in %s of %d", plural(findings, "problem"), plural(failed, "machine"), len(locks))
}

// printCheck checks one lock's graph, prints what it finds and returns
// how many problems it found.
func printCheck(out io.Writer, l lock, goals []graph.State, o checkOutput) (int, error) {
	g := l.graph
	var b strings.Builder
	line := func(format string, args ...any) {
		// Names come from the file: none of their control characters
		// reaches the terminal, and none breaks a line.
		b.WriteString(terminal.Line(fmt.Sprintf(format, args...)) + "\n")
	}
	head := fmt.Sprintf("%s: machine %s, version %d", displayPath(l.file), g.Name, max(g.Version, 1))
	var invalid *graph.ValidationError
	if err := g.Validate(); errors.As(err, &invalid) {
		line("%s: %s, not model-checked", head, plural(len(invalid.Problems), "problem"))
		for _, p := range invalid.Problems {
			line("  %s: %s", p.Code, p.Detail)
		}
		_, err := io.WriteString(out, b.String())
		return len(invalid.Problems), err
	}
	findings := g.Check(goals...)
	if len(findings) == 0 {
		line("%s: ok", head)
		_, err := io.WriteString(out, b.String())
		return 0, err
	}
	line("%s: %s", head, plural(len(findings), "problem"))
	for _, f := range findings {
		line("  %s: %s", f.Code, f.Detail)
		if len(f.Path) > 0 {
			line("    %s", f.Walk())
		}
		if o.mermaid && len(f.Path) > 0 {
			// Mermaid ignores comment lines before the diagram type; this
			// one says which finding it draws.
			line("%%%% machine %s: %s", g.Name, f.Code)
			b.WriteString(terminal.Text(g.MermaidFinding(f)))
		}
	}
	if o.scenario {
		if src := g.Scenario(findings...); src != "" {
			line("// The scenarios of machine %s's problems, to complete as tests:", g.Name)
			b.WriteString(terminal.Text(src))
		}
	}
	_, err := io.WriteString(out, b.String())
	return len(findings), err
}

// newestGraph reads a lock file and returns the graph of its newest
// version.
func newestGraph(file string) (*graph.Graph, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	l, err := graph.ParseLock(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", displayPath(file), err)
	}
	if len(l.Graphs) == 0 {
		return nil, fmt.Errorf("%s: the lock holds no graph", displayPath(file))
	}
	return l.Graphs[slices.Max(slices.Collect(maps.Keys(l.Graphs)))], nil
}

// lockFiles returns the lock files that paths name, sorted: in a
// directory, or in it and below for a pattern that ends in /...
func lockFiles(paths []string) ([]string, error) {
	var files []string
	for _, p := range paths {
		root, recursive := strings.CutSuffix(filepath.ToSlash(p), "...")
		if recursive {
			root = strings.TrimSuffix(root, "/")
			if root == "" {
				root = "."
			}
		}
		found, err := locksIn(filepath.FromSlash(root), recursive)
		if err != nil {
			return nil, err
		}
		files = append(files, found...)
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// locksIn returns the lock files in dir and, when recursive, below it,
// leaving out vendor, testdata and hidden directories; a lock file is
// its own answer.
func locksIn(dir string, recursive bool) ([]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		if !strings.HasSuffix(dir, lockSuffix) {
			return nil, fmt.Errorf("%s is neither a directory nor a lock file (NAME%s)", dir, lockSuffix)
		}
		return []string{dir}, nil
	}
	var files []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != dir {
			name := d.Name()
			if !recursive || name == "vendor" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), lockSuffix) {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// displayPath is path relative to the working directory when it lies
// below it.
func displayPath(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}

// plural writes n things, with an s for any number but one.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
