package scaffold

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/kfsm/kfsm/internal/buildinfo"
)

// Help is what kfsm init says of itself, after its usage line.
const Help = `Init writes a new operator project into DIR (by default the current
directory), which must be new or empty, laid out as kubebuilder lays out
its projects: an API type whose status embeds kfsm's (api/), a machine
with two states and a deletion path, and its tests (internal/controller),
the operator (cmd), kustomize bases to deploy it (config), a record of
its kinds (PROJECT) and a Makefile: test, run, generate, verify, image,
build-installer, install, deploy. Its README says what is where; kfsm
create api adds a kind.

It then runs go mod tidy and controller-gen in the project, for its go.sum,
its CRD and its RBAC role, which reach the Go module proxy, and the
project's hack/generate, for its webhook configurations, its CRD's graph
annotation and its alert rules. The project requires the kfsm release
that this command was built with (go install
github.com/kfsm/kfsm/cmd/kfsm@v0.1.0 builds it with v0.1.0), or the one
that --kfsm-version names; with --kfsm-path it uses a kfsm checkout
instead, through a replace directive, which names the checkout by its
path relative to the project.`

// Flags adds kfsm init's flags, which set p's fields, to fs.
func (p *Project) Flags(fs *flag.FlagSet) {
	fs.StringVar(&p.Module, "module", "", "the Go module path of the project, such as example.com/widget")
	fs.StringVar(&p.Kind, "kind", "", "the kind of the resource the operator drives, such as Widget")
	fs.StringVar(&p.Group, "group", "", "the kind's API group, a domain such as example.com")
	fs.StringVar(&p.Version, "version", "v1alpha1", "the kind's API version")
	fs.StringVar(&p.KFSMVersion, "kfsm-version", "", "the kfsm release for the project to require, by default the one this command was built with")
	fs.StringVar(&p.KFSMPath, "kfsm-path", "", "a kfsm checkout for the project to use instead of a release, which the project names relative to itself")
}

// Init is kfsm init: it writes the project into dir and completes it.
// Unless p names a kfsm version or checkout, the project requires the
// kfsm that this program is built with. What Init does goes to out; the
// output of the steps that complete the project goes to log.
func (p Project) Init(ctx context.Context, dir string, out, log io.Writer) error {
	if p.KFSMVersion != "" && p.KFSMPath != "" {
		return fmt.Errorf("--kfsm-version %s and --kfsm-path %s: a project uses a kfsm release or a kfsm checkout, not both", p.KFSMVersion, p.KFSMPath)
	}
	if p.KFSMVersion == "" {
		p.KFSMVersion = buildinfo.Version()
	}
	if err := p.Write(dir); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote the %s operator in %s; now go mod tidy, controller-gen and hack/generate\n", p.Kind, dir)
	if err := p.Complete(ctx, dir, log); err != nil {
		return err
	}
	fmt.Fprintf(out, "done: cd %s, then make test, and make run\n", dir)
	return nil
}
