package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kfsm/kfsm/cmd/internal/terminal"
	"github.com/kfsm/kfsm/internal/coverage"
)

// coverOutputs are the values of kfsm cover's -o flag.
func coverOutputs() []string { return []string{"summary", "mermaid", "dot"} }

func newCoverCommand() *cobra.Command {
	var (
		output  string
		machine string
		minimum float64
	)
	cmd := &cobra.Command{
		Use:   "cover [flags] PROFILE...",
		Short: "Report which edges of the state machines the tests took",
		Long: `Cover reads edge coverage profiles, written by test packages that run
fsmtest.Main with -kfsm.coverprofile or KFSM_COVERDIR, and merges them: the
counts of a machine seen by several packages add up.

By default it prints one line per machine with the edges covered and those
never taken. With -o mermaid or -o dot it draws each machine's graph instead,
marking the edges never taken. --machine restricts the report to one machine;
--min fails when a machine's edge coverage, in percent, is under it, so that
CI can hold the line; an earlier version of a machine's graph, which a test
kept to migrate from while a later one ran too, is left out. When the
profiles hold several versions of a machine's graph, each line says which
graph version it counts and whether it is the current one.`,
		Example: `  mkdir -p cover && KFSM_COVERDIR=$PWD/cover go test ./...
  kfsm cover cover/*.cover
  kfsm cover -o mermaid --machine moose cover/*.cover > moose.mmd
  kfsm cover --min 80 cover/*.cover`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, paths []string) error {
			if !slices.Contains(coverOutputs(), output) {
				return fmt.Errorf("unknown output %q for -o: want one of %s", output, strings.Join(coverOutputs(), ", "))
			}
			if minimum < 0 || minimum > 100 {
				return fmt.Errorf("--min %g is not a percentage between 0 and 100", minimum)
			}
			p, err := readProfiles(paths)
			if err != nil {
				return err
			}
			machines := p.Machines()
			if machine != "" {
				// Every graph version of the machine, or one graph by
				// the name the profiles keep it under (door#2).
				chosen := slices.DeleteFunc(slices.Clone(machines), func(m string) bool {
					return m != machine && p.Graph(m).Name != machine
				})
				if len(chosen) == 0 {
					return fmt.Errorf("no machine %q in the profiles; they have %s", machine, describeMachines(machines))
				}
				machines = chosen
			}
			if err := printCoverage(cmd.OutOrStdout(), p, machines, output); err != nil {
				return err
			}
			return checkMinimum(p, machines, minimum)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "summary", "what to print: "+strings.Join(coverOutputs(), ", "))
	cmd.Flags().StringVar(&machine, "machine", "", "report only this machine")
	cmd.Flags().Float64Var(&minimum, "min", 0, "fail when a machine's edge coverage, in percent, is under this")
	return cmd
}

// readProfiles reads and merges the profiles at paths.
func readProfiles(paths []string) (*coverage.Profile, error) {
	merged := coverage.New()
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		p, err := coverage.Read(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := merged.Merge(p); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return merged, nil
}

func printCoverage(w io.Writer, p *coverage.Profile, machines []string, output string) error {
	var b strings.Builder
	switch output {
	case "summary":
		// Summary covers every machine; each of its lines starts with the
		// machine's label.
		for line := range strings.Lines(p.Summary()) {
			for _, m := range machines {
				if strings.HasPrefix(line, "machine "+p.Label(m)+": ") {
					b.WriteString(line)
				}
			}
		}
	case "mermaid":
		for i, m := range machines {
			if i > 0 {
				b.WriteString("\n")
			}
			// Mermaid ignores comment lines before the diagram type; this
			// one tells the diagrams apart.
			fmt.Fprintf(&b, "%%%% machine %s\n", terminal.Line(p.Label(m)))
			b.WriteString(p.Graph(m).MermaidCoverage(p.Taken(m)))
		}
	case "dot":
		// The digraphs carry their machine's name, and dot reads several
		// from one file.
		for _, m := range machines {
			b.WriteString(p.Graph(m).DOTCoverage(p.Taken(m)))
		}
	}
	// The names come from the profiles: none of their control characters
	// reaches the terminal.
	_, err := io.WriteString(w, terminal.Text(b.String()))
	return err
}

// checkMinimum fails when a machine's edge coverage is under minimum
// percent. A machine without edges has nothing to cover and never fails.
func checkMinimum(p *coverage.Profile, machines []string, minimum float64) error {
	var under []string
	for _, m := range machines {
		taken, total := p.Covered(m)
		if total > 0 && !p.Superseded(m) && float64(taken)*100 < minimum*float64(total) {
			under = append(under, fmt.Sprintf("%s %.1f%% (%d/%d)", p.Label(m), float64(taken)*100/float64(total), taken, total))
		}
	}
	if len(under) > 0 {
		return fmt.Errorf("edge coverage under %g%%: %s", minimum, strings.Join(under, ", "))
	}
	return nil
}

func describeMachines(machines []string) string {
	if len(machines) == 0 {
		return "none"
	}
	return strings.Join(machines, ", ")
}
