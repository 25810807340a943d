package scaffold

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Complete finishes a project that Write wrote into dir: go mod tidy
// writes its go.sum, controller-gen its CRDs (config/crd/bases) and RBAC
// role (config/rbac/operator), and the project's hack/generate its
// webhook configurations, the graph annotations of its CRDs and its
// Prometheus rules, as make generate does. They run with the go command
// on PATH, outside any Go workspace, and reach the Go module proxy; their
// output goes to log. When one fails, the project stays as it is and the
// error says what to run again.
func (p Project) Complete(ctx context.Context, dir string, log io.Writer) error {
	if _, err := p.validate(dir); err != nil {
		return err
	}
	// The deepcopy code is written already, from its template.
	steps := append([][]string{{"mod", "tidy"}}, goSteps(generateSteps[1:])...)
	return runSteps(ctx, dir, log, steps, func(i int) string {
		if i == 0 {
			return "go mod tidy, then make generate"
		}
		return "make generate"
	})
}

// goSteps are the go commands of lines of make generate.
func goSteps(lines []string) [][]string {
	var steps [][]string
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "$(CONTROLLER_GEN) "):
			steps = append(steps, append([]string{"run", controllerGen}, strings.Fields(strings.TrimPrefix(line, "$(CONTROLLER_GEN) "))...))
		case strings.HasPrefix(line, "$(GO) "):
			steps = append(steps, strings.Fields(strings.TrimPrefix(line, "$(GO) ")))
		default:
			panic("make generate runs " + line) // a line of generateSteps
		}
	}
	return steps
}

// runSteps runs go with each step's arguments in dir. When one fails, the
// error says that, once it is fixed, what again(i) says is to be run.
func runSteps(ctx context.Context, dir string, log io.Writer, steps [][]string, again func(i int) string) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to complete the project in %s: %w", dir, err)
	}
	for i, args := range steps {
		cmd := exec.CommandContext(ctx, goCmd, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s in %s: %w; the project is written there: run %s once this is fixed", strings.Join(args, " "), dir, err, again(i))
		}
	}
	return nil
}
