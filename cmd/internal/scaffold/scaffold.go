// Package scaffold writes a new operator project built on kfsm: an API
// type whose status embeds fsm.Status, a machine with its tests, main.go
// with a controller-runtime manager, a Makefile and the manifests to
// deploy it. It is what kfsm init runs.
//
// Writing is in two steps. [Project.Write] renders the files from the
// templates and writes them, or writes nothing when the project or the
// directory is not right. [Project.Complete] then resolves the project's modules
// (go mod tidy), generates its CRD and RBAC role with controller-gen, both
// of which need the Go module proxy, and its webhook configurations with
// its own program, hack/webhooks. The deepcopy code is rendered
// from a template, as controller-gen writes it, so that the project
// compiles before the second step; the project's make verify checks that
// controller-gen agrees.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"go/format"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// kfsmModule is the module path of kfsm, which every project requires.
const kfsmModule = "github.com/kfsm/kfsm"

// controllerGen is the controller-gen that a project's make generate
// runs, as a go run argument.
const controllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"

// webhooksGen is the program of a project that writes its webhook
// configurations from its machine, with its argument, as go run takes
// them: the last step of make generate.
const webhooksGen = "./hack/webhooks config/webhook/configuration.yaml"

// goVersion is the go line of a new go.mod: kfsm's own. go mod tidy raises
// it if a dependency needs more.
const goVersion = "1.26.0"

// Project describes an operator project to write.
type Project struct {
	// Module is the Go module path, such as example.com/widget.
	Module string
	// Kind is the kind of the resource that the operator drives, such as
	// Widget: a Go identifier that starts with an upper-case letter.
	Kind string
	// Group is the kind's API group, such as example.com: a DNS subdomain
	// with at least one dot, as a CustomResourceDefinition needs.
	Group string
	// Version is the kind's API version; empty means v1alpha1.
	Version string
	// KFSMPath, when set, is a kfsm checkout that the project uses in
	// place of a released kfsm, through a replace directive.
	KFSMPath string
	// KFSMVersion is the kfsm release that the project requires when
	// KFSMPath is empty; it must be a release, such as v0.3.0. kfsm init
	// takes the one it was built with, or --kfsm-version.
	KFSMVersion string
}

// data is what the templates see.
type data struct {
	Module, Kind, Group, Version string
	// Plural is the resource name, such as widgets; Lower the kind in
	// lower case, the name of the machine and of the files.
	Plural, Lower string
	// Receiver is the receiver name of the kind's methods.
	Receiver string
	// Name prefixes the operator's objects: its namespace, service
	// account, role and lease.
	Name string
	// KFSMVersion is the required version of kfsm; KFSMPath, quoted for
	// go.mod if needed, replaces it.
	KFSMVersion, KFSMPath string
	GoVersion             string
	ControllerGen         string
	// Generate are the controller-gen runs of make generate; WebhooksGen
	// its last step.
	Generate    []string
	WebhooksGen string
}

// maxKind keeps the names made from the kind (namespace, service, lease)
// within a DNS label.
const maxKind = 40

var (
	kindPattern    = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	versionPattern = regexp.MustCompile(`^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$`)
	// A release: a semantic version that is not a pseudo-version.
	releasePattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)
	pseudoPattern  = regexp.MustCompile(`[0-9]{14}-[0-9a-f]{12}$`)
	// A DNS subdomain (RFC 1123), as Kubernetes checks it.
	subdomainPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// maxSubdomain is the longest DNS subdomain.
const maxSubdomain = 253

// reservedKinds are names that the API package declares itself.
var reservedKinds = []string{"AddToScheme", "GroupVersion"}

// validate lists every problem of p, and returns what the templates see.
func (p Project) validate() (data, error) {
	if p.Version == "" {
		p.Version = "v1alpha1"
	}
	var problems []error
	if err := checkModulePath(p.Module); err != nil {
		problems = append(problems, err)
	}
	switch {
	case p.Kind == "":
		problems = append(problems, errors.New("kind is empty: name the kind of the resource, such as Widget"))
	case !kindPattern.MatchString(p.Kind):
		problems = append(problems, fmt.Errorf("kind %q is not a Go identifier of ASCII letters and digits that starts with an upper-case letter, such as Widget", p.Kind))
	case len(p.Kind) > maxKind:
		problems = append(problems, fmt.Errorf("kind %q is longer than %d characters", p.Kind, maxKind))
	case slices.Contains(reservedKinds, p.Kind):
		problems = append(problems, fmt.Errorf("kind %q is taken: the API package declares %s itself", p.Kind, p.Kind))
	}
	if err := checkGroup(p.Group); err != nil {
		problems = append(problems, err)
	}
	if !versionPattern.MatchString(p.Version) {
		problems = append(problems, fmt.Errorf("version %q is not a Kubernetes API version, such as v1alpha1, v1beta2 or v1", p.Version))
	}
	version, kfsmPath, err := p.kfsm()
	if err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return data{}, errors.Join(problems...)
	}
	lower := strings.ToLower(p.Kind)
	d := data{
		Module: p.Module, Kind: p.Kind, Group: p.Group, Version: p.Version,
		Plural: plural(lower), Lower: lower, Receiver: lower[:1], Name: lower + "-operator",
		KFSMVersion: version, KFSMPath: kfsmPath, GoVersion: goVersion,
		ControllerGen: controllerGen, WebhooksGen: webhooksGen,
	}
	d.Generate = d.generate()
	return d, nil
}

// generate are the controller-gen runs of make generate, in order: the
// deepcopy code, then the manifests.
func (d data) generate() []string {
	return append([]string{"object paths=./api/..."}, d.manifests()...)
}

// manifests are the controller-gen runs that write the CRD and the role.
func (d data) manifests() []string {
	return []string{
		"crd paths=./api/... output:crd:artifacts:config=config/crd",
		"rbac:roleName=" + d.Name + " paths=./internal/... output:rbac:artifacts:config=config/rbac",
	}
}

// kfsm returns the version of kfsm that the project requires and the
// checkout that replaces it, if any.
func (p Project) kfsm() (version, replace string, err error) {
	if p.KFSMPath == "" {
		if !releasePattern.MatchString(p.KFSMVersion) || pseudoPattern.MatchString(p.KFSMVersion) {
			return "", "", fmt.Errorf("kfsm %s is not a release that a module proxy serves, such as v0.1.0 (a kfsm command built from a checkout knows no release of its own): "+
				"name the release for the project to require with --kfsm-version, or a kfsm checkout for it to use with --kfsm-path", p.KFSMVersion)
		}
		return p.KFSMVersion, "", nil
	}
	dir, err := filepath.Abs(p.KFSMPath)
	if err != nil {
		return "", "", fmt.Errorf("kfsm path %s: %w", p.KFSMPath, err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", "", fmt.Errorf("kfsm path %s is not a kfsm checkout: %w", p.KFSMPath, err)
	}
	if modulePath(mod) != kfsmModule {
		return "", "", fmt.Errorf("kfsm path %s is not a kfsm checkout: its go.mod is not module %s", p.KFSMPath, kfsmModule)
	}
	if strings.ContainsAny(dir, " \t\"'`\\") {
		dir = strconv.Quote(dir)
	}
	// The version a replaced requirement conventionally names.
	return "v0.0.0-00010101000000-000000000000", dir, nil
}

// modulePath reads the module line of a go.mod.
func modulePath(mod []byte) string {
	for line := range strings.Lines(string(mod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// checkModulePath checks a module path for what go mod init accepts:
// slash-separated elements of letters, digits and -._~, none empty and none
// starting or ending with a dot.
func checkModulePath(m string) error {
	if m == "" {
		return errors.New("module is empty: name the Go module path of the project, such as example.com/widget")
	}
	for elem := range strings.SplitSeq(m, "/") {
		if elem == "" || strings.HasPrefix(elem, ".") || strings.HasSuffix(elem, ".") ||
			strings.ContainsFunc(elem, func(r rune) bool { return !modulePathRune(r) }) {
			return fmt.Errorf("module %q is not a Go module path: its elements, between slashes, are letters, digits and -._~, such as example.com/widget", m)
		}
	}
	if m == kfsmModule || strings.HasPrefix(m, kfsmModule+"/") {
		return fmt.Errorf("module %q is kfsm's own: choose a path of your own", m)
	}
	return nil
}

func modulePathRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~", r)
}

// checkGroup checks an API group as a CustomResourceDefinition needs it.
func checkGroup(g string) error {
	if g == "" {
		return errors.New("group is empty: name the API group of the kind, a DNS name such as example.com")
	}
	if len(g) > maxSubdomain || !subdomainPattern.MatchString(g) {
		return fmt.Errorf("group %q is not a DNS subdomain: at most %d lower-case letters, digits, '-' and '.', with a letter or digit at each end of each part between dots", g, maxSubdomain)
	}
	if !strings.Contains(g, ".") {
		return fmt.Errorf("group %q has no dot: a CustomResourceDefinition's group is a domain, such as %s.example.com", g, g)
	}
	return nil
}

// plural is the English plural of a lower-case kind, which is the
// resource's name.
func plural(s string) string {
	switch {
	case strings.HasSuffix(s, "s"), strings.HasSuffix(s, "x"), strings.HasSuffix(s, "z"),
		strings.HasSuffix(s, "ch"), strings.HasSuffix(s, "sh"):
		return s + "es"
	case len(s) > 1 && strings.HasSuffix(s, "y") && !strings.ContainsRune("aeiou", rune(s[len(s)-2])):
		return s[:len(s)-1] + "ies"
	}
	return s + "s"
}

//go:embed templates
var templates embed.FS

// files maps each template to the path of the file it renders, itself a
// template.
var files = []struct{ tmpl, path string }{
	{"go.mod.tmpl", "go.mod"},
	{"main.go.tmpl", "main.go"},
	{"main_test.go.tmpl", "main_test.go"},
	{"Makefile.tmpl", "Makefile"},
	{"README.md.tmpl", "README.md"},
	{"api/groupversion_info.go.tmpl", "api/{{.Version}}/groupversion_info.go"},
	{"api/types.go.tmpl", "api/{{.Version}}/{{.Lower}}_types.go"},
	{"api/zz_generated.deepcopy.go.tmpl", "api/{{.Version}}/zz_generated.deepcopy.go"},
	{"controller/machine.go.tmpl", "internal/controller/{{.Lower}}.go"},
	{"controller/machine_test.go.tmpl", "internal/controller/{{.Lower}}_test.go"},
	{"hack/webhooks.go.tmpl", "hack/webhooks/main.go"},
	{"config/manager.yaml.tmpl", "config/manager/manager.yaml"},
	{"config/webhook.yaml.tmpl", "config/webhook/service.yaml"},
	{"config/sample.yaml.tmpl", "config/samples/{{.Lower}}.yaml"},
}

// Files renders the project's files, by slash-separated path. Go files
// are formatted as gofmt does. Complete adds go.sum, the CRD, the role and
// the webhook configurations.
func (p Project) Files() (map[string][]byte, error) {
	d, err := p.validate()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(files))
	for _, f := range files {
		name, err := render(f.path, []byte(f.path), d)
		if err != nil {
			return nil, err
		}
		src, err := templates.ReadFile(path.Join("templates", f.tmpl))
		if err != nil {
			return nil, err
		}
		content, err := render(f.tmpl, src, d)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(string(name), ".go") {
			if content, err = format.Source(content); err != nil {
				return nil, fmt.Errorf("template %s makes Go that does not parse: %w", f.tmpl, err)
			}
		}
		out[string(name)] = content
	}
	return out, nil
}

func render(name string, src []byte, d data) ([]byte, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// Write writes the project into dir, which must be absent or empty (but
// for a .git directory). When the project or the directory is not right
// it returns every problem and writes nothing; when a write fails it
// removes what it wrote.
func (p Project) Write(dir string) (err error) {
	out, err := p.Files()
	if err != nil {
		if dirErr := checkDir(dir); dirErr != nil {
			return errors.Join(err, dirErr)
		}
		return err
	}
	if err := checkDir(dir); err != nil {
		return err
	}
	_, statErr := os.Stat(dir)
	created := errors.Is(statErr, os.ErrNotExist)
	var written []string // top-level entries of dir
	defer func() {
		if err == nil {
			return
		}
		if created {
			_ = os.RemoveAll(dir)
			return
		}
		for _, name := range written {
			_ = os.RemoveAll(filepath.Join(dir, name))
		}
	}()
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if top, _, _ := strings.Cut(name, "/"); !slices.Contains(written, top) {
			written = append(written, top)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, out[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// checkDir says why dir cannot hold a new project, if it cannot.
func checkDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != ".git" {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil
	}
	if len(names) > 3 {
		names = append(names[:3], "...")
	}
	return fmt.Errorf("directory %s is not empty (it holds %s): choose a new or empty directory", dir, strings.Join(names, ", "))
}
