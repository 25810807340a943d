// Command release is what make release runs: it checks that kfsm's tree
// is ready for a release, makes the release commit, in which kfsm's
// modules require one another at the version, and tags each module there.
// Then it builds the kubectl plugin, kubectl-fsm, from the release commit
// for each platform into dist/, with the archives' SHA256SUMS and krew's
// manifest, fsm.yaml, which names each archive by its URL under
// -download-url. It pushes and uploads nothing.
//
//	go run . -repo ../.. -version v0.2.0 [-tested COMMIT] [-download-url URL]
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
	downloadURL := flag.String("download-url", "https://github.com/kfsm/kfsm/releases/download/{version}",
		"the URL of the directory that the plugin's archives are downloaded from once published, {version} standing for the version")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := run(ctx, *repo, *version, *tested, *downloadURL); err != nil {
		fmt.Fprintln(os.Stderr, "make release:", err)
		cancel()
		os.Exit(1)
	}
}

func run(ctx context.Context, repo, version, tested, downloadURL string) error {
	dir, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	r := &release{repo: dir, version: version, tested: tested, plugin: kubectlFsm(downloadURL), out: os.Stdout}
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

// kubectlFsm is kfsm's kubectl plugin, as krew publishes it.
func kubectlFsm(downloadURL string) *plugin {
	return &plugin{
		module: "cmd", pkg: "./kubectl-fsm", binary: "kubectl-fsm", name: "fsm",
		homepage:         "https://github.com/kfsm/kfsm",
		shortDescription: "See kfsm state machines and their objects",
		description: `kubectl fsm shows the state machines that operators built with kfsm
run, and the objects they drive: a machine's graph, each object's state,
how long it has been there and what keeps it from Ready, and each
transition as it happens. It retries, pauses and resumes an object. It
reads the graph that the operator publishes on its CustomResourceDefinition
and the status that kfsm keeps, without the operator's code.
`,
		caveats: `Reading needs get, list and watch on the machine's resource, get on
customresourcedefinitions and list on events.k8s.io events; retry,
pause and resume need patch on the resource.
`,
		platforms: []platform{
			{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"},
		},
		downloadURL: downloadURL,
	}
}
