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

// progress counts what go list and go build -v report, for periodic
// messages: the modules that go list downloads while it finds the
// packages to compile, then those of them that go build compiles.
type progress struct {
	start     time.Time
	mu        sync.Mutex
	stale     map[string]bool // nil until go list has found them
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
	if p.stale != nil && !strings.Contains(l, " ") {
		p.last = "compiling " + l
		if p.stale[l] {
			p.compiled++
			p.stale[l] = false
		}
	}
}

// build says that go list found these packages to compile, and that the
// lines to come are go build's.
func (p *progress) build(stale []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stale = make(map[string]bool, len(stale))
	for _, pkg := range stale {
		p.stale[pkg] = true
	}
}

func (p *progress) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	elapsed := time.Since(p.start).Round(time.Second)
	if p.stale == nil {
		return fmt.Sprintf("%s elapsed, %d modules downloaded, last: %s", elapsed, p.downloads, p.last)
	}
	total := len(p.stale)
	if total == 0 {
		return fmt.Sprintf("every package was in Go's build cache, %s elapsed", elapsed)
	}
	return fmt.Sprintf("%d of %d packages compiled (%d%%), %s elapsed, last: %s",
		p.compiled, total, p.compiled*100/max(total, 1), elapsed, p.last)
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
