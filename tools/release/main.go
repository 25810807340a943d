// Command release is what make release runs: it checks that kfsm's tree
// is ready for a release, makes the release commit, in which kfsm's
// modules require one another at the version, and tags each module there.
// It pushes nothing.
//
//	go run . -repo ../.. -version v0.2.0 [-tested COMMIT]
//
// Unless -tested names the commit to release as one that passed make test
// in the same run, it runs make test first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
)

func main() {
	repo := flag.String("repo", "../..", "the repository's top directory")
	version := flag.String("version", "", "the version to release, such as v0.2.0")
	tested := flag.String("tested", "", "the commit to release, which passed make test in this run")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := run(ctx, *repo, *version, *tested); err != nil {
		fmt.Fprintln(os.Stderr, "make release:", err)
		cancel()
		os.Exit(1)
	}
}

func run(ctx context.Context, repo, version, tested string) error {
	dir, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	r := &release{repo: dir, version: version, tested: tested, out: os.Stdout}
	r.test = func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, "make", "-C", dir, "test")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("make test: %w", err)
		}
		return nil
	}
	return r.run(ctx)
}
