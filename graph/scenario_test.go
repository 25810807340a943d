package graph

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// parseScenario fails unless src is a Go file whose every import is used
// and whose tests are named as go test runs them, and returns it.
func parseScenario(t *testing.T, src string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "scenario_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatalf("the scenario is not valid Go: %v\n%s", err, src)
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok {
				used[x.Name] = true
			}
		}
		return true
	})
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if !used[path[strings.LastIndex(path, "/")+1:]] {
			t.Errorf("the scenario imports %s and does not use it:\n%s", path, src)
		}
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && !strings.HasPrefix(fn.Name.Name, "Test") {
			t.Errorf("the scenario declares %s, which is no test", fn.Name.Name)
		}
	}
	return f
}

// tests returns the names of the file's functions.
func tests(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok {
			names = append(names, fn.Name.Name)
		}
	}
	return names
}

func TestScenarioWalksEachFinding(t *testing.T) {
	cases := map[string]struct {
		graph *Graph
		goals []State
		tests []string
		has   []string
		lacks []string
	}{
		"Trap": {
			graph: job(),
			tests: []string{"TestJobTrapParked"},
			has: []string{"package job_test\n", "e.Create(obj)\n", `e.AwaitState(obj, "Queued")`, `e.AwaitState(obj, "Parked")`,
				`fsm.Next("Unparked")`, "e.AwaitReady(obj)\n"},
			lacks: []string{`"time"`, "e.Delete(obj)"},
		},
		"DeletionTrap": {
			graph: volume(),
			tests: []string{"TestVolumeDeletionTrapDetaching"},
			has:   []string{"e.Delete(obj)\n\te.AwaitState(obj, \"Draining\")", `e.AwaitState(obj, "Orphaned")`, "e.AwaitGone(obj)\n"},
		},
		"UnboundedCycles": {
			graph: syncer(),
			tests: []string{"TestSyncUnboundedCycleSyncing", "TestSyncUnboundedCycleCleanup"},
			has:   []string{"\t\"time\"\n", "e.Clock.Step(5 * time.Minute)\n", "make Backoff's handler fail (fsm.Fail) 3 times"},
		},
		"Goal": {
			graph: database(),
			goals: []State{"Servicing", "Nowhere"},
			tests: []string{"TestDatabaseGoalUnreachableServicing"},
			has:   []string{"give obj the goal Servicing", `e.AwaitState(obj, "Stopping")` + "\n\n", `e.AwaitState(obj, "Servicing")` + "\n}"},
		},
		"OddNames": {
			graph: &Graph{Name: "9 lives", States: []StateSpec{
				{Name: "a\nb", Initial: true, Exits: []State{`q"uote`}, Timeout: &Timeout{After: time.Second, To: `q"uote`}},
				{Name: `q"uote`, Timeout: &Timeout{After: 1500 * time.Millisecond, To: "a\nb"}},
			}},
			tests: []string{"Test9LivesTrapAB"},
			has: []string{"package machine9lives_test\n", `e.AwaitState(obj, "q\"uote")`, "e.Clock.Step(1500 * time.Millisecond)",
				`// 1. "a\nb" -> q"uote, an exit`},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			src := c.graph.Scenario(c.graph.Check(c.goals...)...)
			f := parseScenario(t, src)
			if diff := cmp.Diff(c.tests, tests(f)); diff != "" {
				t.Errorf("the scenario's tests (-want +got):\n%s", diff)
			}
			for _, s := range c.has {
				if !strings.Contains(src, s) {
					t.Errorf("the scenario lacks %q:\n%s", s, src)
				}
			}
			for _, s := range c.lacks {
				if strings.Contains(src, s) {
					t.Errorf("the scenario has %q:\n%s", s, src)
				}
			}
		})
	}
}

func TestScenarioNamesTwoTestsApart(t *testing.T) {
	g := syncer()
	f := g.Check()[0]
	src := g.Scenario(f, f)
	if diff := cmp.Diff([]string{"TestSyncUnboundedCycleSyncing", "TestSyncUnboundedCycleSyncing2"}, tests(parseScenario(t, src))); diff != "" {
		t.Errorf("the tests of two findings of one name (-want +got):\n%s", diff)
	}
}

func TestDurationCode(t *testing.T) {
	for d, want := range map[time.Duration]string{
		2 * time.Hour:           "2 * time.Hour",
		90 * time.Minute:        "90 * time.Minute",
		45 * time.Second:        "45 * time.Second",
		1500 * time.Millisecond: "1500 * time.Millisecond",
		1500:                    "time.Duration(1500)",
		0:                       "time.Duration(0)",
	} {
		if got := durationCode(d); got != want {
			t.Errorf("durationCode(%v) = %q, want %q", d, got, want)
		}
	}
}

// The scenarios of findings are kept in golden files, as the exports are.
func TestScenarioMatchesGoldenFiles(t *testing.T) {
	for _, g := range []*Graph{job(), volume(), syncer()} {
		matchGolden(t, filepath.Join("testdata", g.Name+".scenario.golden"), g.Scenario(g.Check()...))
	}
}
