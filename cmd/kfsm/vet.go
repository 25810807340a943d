package main

import (
	"cmp"
	"fmt"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/cmd/internal/vettool"
	"github.com/kfsm/kfsm/fsmvet"
)

// go vet -vettool=$(which kfsm) runs this program with the arguments of
// its own protocol; the analyzer answers them, before any command runs.
// kfsm-vet does the same and starts faster.
func init() {
	if vettool.Is(os.Args[1:]) {
		vettool.Main(os.Args[1:])
	}
}

func newVetCommand() *cobra.Command {
	var warnings, tests bool
	cmd := &cobra.Command{
		Use:   "vet [flags] [packages]",
		Short: "Find the transitions that kfsm would refuse and the graph changes that strand objects, before the code runs",
		Long: `Vet reads the state machines that the packages declare with fsm.New, and
for each state the Nexts that its handler can return with constant states.
It reports, as errors, a Next that kfsm would refuse at run time: to a state
that is not among the state's exits (with the fsm.To to declare), to a state
that the machine does not declare (with the closest name), or from a
handler that serves several states, legal for one and not another. It
reports, as an error too, a machine that no longer declares a state of a
released version, kept in the machine's lock file (NAME.graph.lock.json in
the package's directory, which make generate writes), with no migration
(Machine.Version) to move the state's objects: once the operator is
upgraded, they would stop. It warns about states that nothing moves to,
exits that no handler takes, a machine with a lock file whose states or
versions it cannot read, and a Next of the current code that a machine
kept from an earlier release in a test file refuses. What it cannot resolve, such as a target
computed at run time, it skips.

Vet exits with status 1 when it finds an error; warnings alone do not fail
it. The packages default to ./..., test files included. The same checks run
under go vet with the kfsm-vet command as its -vettool (go install
github.com/kfsm/kfsm/cmd/kfsm-vet), and in golangci-lint as a module plugin:
see https://pkg.go.dev/github.com/kfsm/kfsm/fsmvet.`,
		Example: `  kfsm vet ./...
  kfsm vet --warnings=false ./internal/operator/...
  go vet -vettool=$(which kfsm-vet) ./...`,
		RunE: func(cmd *cobra.Command, patterns []string) error {
			if len(patterns) == 0 {
				patterns = []string{"./..."}
			}
			return vet(cmd.OutOrStdout(), patterns, warnings, tests)
		},
	}
	cmd.Flags().BoolVar(&warnings, "warnings", true, "also report states that nothing moves to, exits that no handler takes, locks that cannot be checked and what a kept earlier machine refuses")
	cmd.Flags().BoolVar(&tests, "tests", true, "also check the packages' test files")
	return cmd
}

// vet runs the analyzer on the packages that patterns name and prints its
// findings, one a line, sorted by place.
func vet(out io.Writer, patterns []string, warnings, tests bool) error {
	cfg := &packages.Config{Mode: packages.LoadSyntax, Tests: tests}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return err
	}
	if len(pkgs) == 0 {
		return fmt.Errorf("no packages match %s", strings.Join(patterns, " "))
	}
	var broken []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			broken = append(broken, e.Error())
		}
	})
	if len(broken) > 0 {
		return fmt.Errorf("the packages do not compile:\n%s", strings.Join(slices.Compact(broken), "\n"))
	}
	graph, err := checker.Analyze([]*analysis.Analyzer{fsmvet.Analyzer}, pkgs, nil)
	if err != nil {
		return err
	}
	type finding struct {
		pos     token.Position
		warning bool
		msg     string
	}
	var findings []finding
	seen := map[string]bool{}
	for _, act := range graph.Roots {
		if act.Err != nil {
			return act.Err
		}
		for _, d := range act.Diagnostics {
			f := finding{act.Package.Fset.Position(d.Pos), fsmvet.IsWarning(d.Category), d.Message}
			key := f.pos.String() + " " + f.msg
			if seen[key] || (f.warning && !warnings) {
				continue // a package and its test variant see the same code
			}
			seen[key] = true
			findings = append(findings, f)
		}
	}
	slices.SortFunc(findings, func(a, b finding) int {
		return cmp.Or(strings.Compare(a.pos.Filename, b.pos.Filename), cmp.Compare(a.pos.Line, b.pos.Line),
			cmp.Compare(a.pos.Column, b.pos.Column), strings.Compare(a.msg, b.msg))
	})
	wd, _ := os.Getwd()
	errors := 0
	for _, f := range findings {
		kind := ""
		if f.warning {
			kind = "warning: "
		} else {
			errors++
		}
		name := f.pos.Filename
		if rel, err := filepath.Rel(wd, name); err == nil && !strings.HasPrefix(rel, "..") {
			name = rel
		}
		// The message names states as the code spells them: one line, with
		// no control character for the terminal to obey.
		fmt.Fprintf(out, "%s:%d:%d: %s%s\n", terminal.Line(name), f.pos.Line, f.pos.Column, kind, terminal.Line(f.msg))
	}
	switch errors {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("found 1 error")
	}
	return fmt.Errorf("found %d errors", errors)
}
