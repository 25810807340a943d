package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

const (
	// answerTimeout bounds the wait for the answer to a command.
	answerTimeout = time.Minute
	// stopTimeout bounds the wait for a controller to stop at the end of
	// its input, before it is killed.
	stopTimeout = 30 * time.Second
	// pollEvery is how often the driver asks a controller for a report
	// while it waits for it to be quiet.
	pollEvery = 100 * time.Millisecond
)

// process is a controller process, seen from the driver: it reads
// commands on its standard input and answers each with a JSON line.
type process struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan []byte   // closed at the end of its output
	done  chan struct{} // closed once it has exited, with err
	err   error
}

// controllerArgs are the flags of a controller process of the run's
// implementation over ns, its log and profiles named by the run and
// suffix.
func (d *driver) controllerArgs(r run, ns, suffix string) controllerArgs {
	return controllerArgs{
		impl: r.impl, namespace: ns, kubeconfig: d.cluster.Kubeconfig, workers: r.workers,
		cpuprofile: d.profile(r, suffix), log: filepath.Join(d.logs, r.name()+suffix+".log"),
	}
}

// startController starts a controller process with args. It dies with
// ctx and with the driver.
func (d *driver) startController(ctx context.Context, args controllerArgs) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the program to start the controller: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, args.list()...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = processAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A pipe of the driver's own rather than StdoutPipe: Wait would close
	// StdoutPipe's while its lines are still being read.
	out, in, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = in
	err = cmd.Start()
	_ = in.Close()
	if err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("starting the controller: %w", err)
	}
	p := &process{cmd: cmd, stdin: stdin, lines: make(chan []byte), done: make(chan struct{})}
	go p.read(out)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) read(out *os.File) {
	defer func() { _ = out.Close() }()
	defer close(p.lines)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		select {
		case p.lines <- bytes.Clone(sc.Bytes()):
		case <-p.done:
			return
		}
	}
}

// command sends a command and reads the answer.
func (p *process) command(c string) (report, error) {
	var rep report
	if _, err := io.WriteString(p.stdin, c+"\n"); err != nil {
		return rep, p.exited(fmt.Errorf("sending %q to the controller: %w", c, err))
	}
	select {
	case line, ok := <-p.lines:
		if !ok {
			return rep, p.exited(fmt.Errorf("the controller closed its output instead of answering %q", c))
		}
		if err := json.Unmarshal(line, &rep); err != nil {
			return rep, fmt.Errorf("reading the controller's answer to %q: %w", c, err)
		}
		return rep, nil
	case <-time.After(answerTimeout):
		return rep, fmt.Errorf("the controller did not answer %q within %s", c, answerTimeout)
	}
}

func (p *process) report() (report, error) { return p.command("report") }

// exited adds to err how the controller exited, if it did.
func (p *process) exited(err error) error {
	select {
	case <-p.done:
		return fmt.Errorf("%w (the controller exited: %w)", err, exitError(p.err))
	case <-time.After(5 * time.Second):
		return err
	}
}

func exitError(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}

// await waits for ready, while watching the controller.
func (p *process) await(ctx context.Context, ready <-chan error, timeout time.Duration) error {
	return awaitAll(ctx, []*process{p}, ready, timeout)
}

// awaitAll waits for ready, while watching the controllers: one exiting
// ends the wait.
func awaitAll(ctx context.Context, ps []*process, ready <-chan error, timeout time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan error, len(ps))
	for i, p := range ps {
		name := "the controller"
		if len(ps) > 1 {
			name = fmt.Sprintf("controller %d of %d", i+1, len(ps))
		}
		go func() {
			select {
			case <-p.done:
				exited <- fmt.Errorf("%s exited: %w", name, exitError(p.err))
			case <-ctx.Done():
			}
		}()
	}
	select {
	case err := <-ready:
		return err
	case err := <-exited:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("not all were Ready after %s", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settle waits until the controller has finished at least target
// reconciles and then neither made a request nor finished a reconcile for
// the quiet period, and returns its report of that moment.
func (p *process) settle(ctx context.Context, target int, timeout time.Duration) (report, error) {
	return p.settleFor(ctx, target, quiet, timeout)
}

// settleFor is settle with a quiet period of its own.
func (p *process) settleFor(ctx context.Context, target int, quiet, timeout time.Duration) (report, error) {
	deadline := time.After(timeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last report
	changed := time.Now()
	for {
		select {
		case <-tick.C:
		case <-deadline:
			return last, fmt.Errorf("not quiet after %s: %d reconciles of %d, the latest request %.1f s ago", timeout, last.Reconciles, target, last.Idle)
		case <-ctx.Done():
			return last, ctx.Err()
		}
		rep, err := p.report()
		if err != nil {
			return rep, err
		}
		if rep.Reconciles != last.Reconciles {
			changed = time.Now()
		}
		last = rep
		if rep.Reconciles >= target && rep.Idle >= quiet.Seconds() && time.Since(changed) >= quiet {
			return rep, nil
		}
	}
}

// stop ends the controller's input, so that it stops its manager and
// exits, and waits; a controller that does not stop in time is killed.
func (p *process) stop() error {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("the controller did not stop within %s", stopTimeout)
	}
	if p.err != nil {
		return fmt.Errorf("the controller: %w", p.err)
	}
	return nil
}

// stopAll stops the controllers at once, so that none takes over the
// slots of another that is leaving.
func stopAll(ps []*process) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// kill kills the controller unless it has exited, and waits.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}
