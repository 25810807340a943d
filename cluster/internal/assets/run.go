package assets

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// BuildError is a failed step of a build, with the end of the go command's
// output, which is where the compiler puts its verdict.
type BuildError struct {
	Step   string
	Output string
	Err    error
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("%s: %v\n%s", e.Step, e.Err, e.Output)
}

func (e *BuildError) Unwrap() error { return e.Err }

const (
	tailLines     = 30
	progressEvery = 15 * time.Second
)

// progress counts what go build -v reports, for periodic messages.
type progress struct {
	start     time.Time
	mu        sync.Mutex
	compiled  int
	downloads int
	last      string
}

func (p *progress) line(l string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mod, ok := strings.CutPrefix(l, "go: downloading "); ok {
		p.downloads++
		p.last = "downloading " + mod
		return
	}
	if !strings.Contains(l, " ") {
		p.compiled++
		p.last = "compiling " + l
	}
}

func (p *progress) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%s elapsed, %d modules downloaded, %d packages compiled, last: %s",
		time.Since(p.start).Round(time.Second), p.downloads, p.compiled, p.last)
}

func goCommand() (string, error) {
	path, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is needed to build the cluster binaries: %w", err)
	}
	return path, nil
}

// run runs the go command in dir and returns its standard output. Standard
// error feeds p, when given, and its tail goes into the error.
func (c *Cache) run(ctx context.Context, dir, step string, p *progress, args ...string) ([]byte, error) {
	goCmd, err := goCommand()
	if err != nil {
		return nil, &BuildError{Step: step, Err: err}
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	// The module is built as pinned, whatever the caller's environment says.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, &BuildError{Step: step, Err: err}
	}
	if err := cmd.Start(); err != nil {
		return nil, &BuildError{Step: step, Err: err}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	if p != nil {
		wg.Go(func() {
			t := time.NewTicker(progressEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					c.printf("%s: %s\n", step, p)
				}
			}
		})
	}
	var tail []string
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		l := sc.Text()
		if p != nil {
			p.line(l)
		}
		tail = append(tail, l)
		if len(tail) > tailLines {
			tail = tail[1:]
		}
	}
	// A line too long for the scanner ends the loop; keep the pipe flowing
	// so that go never blocks on it.
	_, _ = io.Copy(io.Discard, stderr)
	err = cmd.Wait()
	close(stop)
	wg.Wait()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, &BuildError{Step: step, Err: err, Output: strings.Join(tail, "\n")}
	}
	return stdout.Bytes(), nil
}
