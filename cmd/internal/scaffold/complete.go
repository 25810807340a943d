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
// writes its go.sum, controller-gen its CRD (config/crd) and RBAC role
// (config/rbac), and the project's hack/webhooks its webhook
// configurations (config/webhook/configuration.yaml), as make generate
// does. They run with the go command on PATH, outside any Go workspace,
// and reach the Go module proxy; their output goes to log. When one
// fails, the project stays as it is and the error says what to run again.
func (p Project) Complete(ctx context.Context, dir string, log io.Writer) error {
	d, err := p.validate()
	if err != nil {
		return err
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to complete the project in %s: %w", dir, err)
	}
	steps := [][]string{{"mod", "tidy"}}
	// The deepcopy code is written already, from its template.
	for _, g := range d.manifests() {
		steps = append(steps, append([]string{"run", controllerGen}, strings.Fields(g)...))
	}
	steps = append(steps, append([]string{"run"}, strings.Fields(webhooksGen)...))
	for i, args := range steps {
		cmd := exec.CommandContext(ctx, goCmd, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			again := "go mod tidy, then make generate"
			if i > 0 {
				again = "make generate"
			}
			return fmt.Errorf("go %s in %s: %w; the project is written there: run %s once this is fixed", strings.Join(args, " "), dir, err, again)
		}
	}
	return nil
}
