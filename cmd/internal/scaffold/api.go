package scaffold

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// APIHelp is what kfsm create api says of itself, after its usage line.
const APIHelp = `Create api adds a kind to the operator project in the current directory,
which kfsm init wrote: its API type (in the project's first API version
unless --version says another), its machine with two states and a
deletion path, its tests, a sample, and its editor and viewer roles; it
adds the kind to cmd/main.go, hack/generate, the tests' scheme, the
kustomizations and PROJECT. It then runs make generate's steps, which
write the kind's deepcopy code, its CRD, its RBAC role and its webhook
configurations. The project passes make verify and make test after it.`

// API describes a kind to add to a project.
type API struct {
	// Kind is the new kind, such as Gadget.
	Kind string
	// Version is its API version; empty means the version of the
	// project's first kind.
	Version string
}

// Flags adds kfsm create api's flags, which set a's fields, to fs.
func (a *API) Flags(fs *flag.FlagSet) {
	fs.StringVar(&a.Kind, "kind", "", "the new kind, such as Gadget")
	fs.StringVar(&a.Version, "version", "", "its API version; by default the version of the project's first kind")
}

// Create adds the kind to the project in dir and completes it: what
// Create does goes to out, the output of make generate's steps to log.
// When the kind or the project is not right it returns every problem and
// changes nothing.
func (a API) Create(ctx context.Context, dir string, out, log io.Writer) error {
	changed, err := a.Files(os.DirFS(dir))
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(changed)) {
		if err := writeFile(dir, name, changed[name]); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "added the %s kind to the project; now make generate\n", a.Kind)
	if err := runSteps(ctx, dir, log, goSteps(generateSteps), func(int) string { return "make generate" }); err != nil {
		return err
	}
	fmt.Fprintf(out, "done: make test, then write the %s machine in internal/controller/%s.go\n", a.Kind, strings.ToLower(a.Kind))
	return nil
}

// Files returns the files of the project in fsys that adding the kind
// writes, new and changed, by slash-separated path.
func (a API) Files(fsys fs.FS) (map[string][]byte, error) {
	src, err := fs.ReadFile(fsys, recordFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s here: kfsm create api adds a kind to a project that kfsm init wrote, in its directory", recordFile)
	}
	if err != nil {
		return nil, err
	}
	rec, err := parseRecord(src)
	if err != nil {
		return nil, err
	}
	if len(rec.Kinds) == 0 {
		return nil, fmt.Errorf("%s lists no kind", recordFile)
	}
	if a.Version == "" {
		a.Version = rec.Kinds[0].Version
	}
	problems := checkKind(a.Kind, a.Version)
	if rec.has(a.Kind) {
		problems = append(problems, fmt.Errorf("kind %s is the project's already", a.Kind))
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	d := data{Module: rec.Module, Group: rec.Group, Name: rec.Name, kind: newKind(rec.Module, a.Kind, a.Version)}

	// The files that the kind changes, as they are; those it adds must
	// not be there.
	files := map[string][]byte{recordFile: src}
	changes := []string{"api/" + d.Version + "/zz_generated.deepcopy.go"}
	for _, in := range inserts {
		name, err := render(in.path, []byte(in.path), d)
		if err != nil {
			return nil, err
		}
		changes = append(changes, string(name))
	}
	for _, name := range changes {
		if !rec.hasVersion(d.Version) && strings.HasPrefix(name, "api/"+d.Version+"/") {
			continue // a new version's package is written whole
		}
		content, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("the kind goes into %s: %w", name, err)
		}
		files[name] = content
	}
	before := maps.Clone(files)
	if err := addKind(files, d); err != nil {
		return nil, err
	}
	for name := range files {
		if _, ok := before[name]; ok {
			continue
		}
		if _, err := fs.Stat(fsys, name); err == nil {
			return nil, fmt.Errorf("%s exists already", filepath.FromSlash(name))
		}
	}
	return files, nil
}
