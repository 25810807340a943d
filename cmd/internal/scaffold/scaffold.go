// Package scaffold writes a new operator project built on kfsm, laid out
// as kubebuilder lays out its projects: API types whose status embeds
// fsm.Status (api/<version>), their machines with their tests
// (internal/controller), the operator (cmd), a Makefile, the kustomize
// bases to deploy it (config) and a record of its kinds (PROJECT). It is
// what kfsm init runs, and kfsm create api, which adds a kind.
//
// Writing is in two steps. [Project.Write] renders the files from the
// templates and writes them, or writes nothing when the project or the
// directory is not right. [Project.Complete] then resolves the project's modules
// (go mod tidy), generates its CRDs and RBAC role with controller-gen, both
// of which need the Go module proxy, and, with its own program
// hack/generate, its webhook configurations, the graph annotations of its
// CRDs, its Prometheus rules and its machines' graph locks. The deepcopy code is rendered
// from a template, as controller-gen writes it, so that the project
// compiles before the second step; the project's make verify checks that
// controller-gen agrees. [API.Create] takes the same two steps for a new
// kind.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
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

// controllerGen and kustomize are the controller-gen and the kustomize
// that a project's Makefile runs, as go run arguments; goContainerRegistry
// is the version of the module that its hack/image builds images with,
// and certController the version of the one whose rotator keeps the
// operator's webhook certificate.
const (
	controllerGen       = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"
	kustomize           = "sigs.k8s.io/kustomize/kustomize/v5@v5.8.1"
	goContainerRegistry = "v0.22.1"
	certController      = "v0.16.0"
)

// generateProgram is the program of a project that writes, from its
// machines, its webhook configurations, the graph annotations of its CRDs
// and its Prometheus rules: the last step of make generate.
const generateProgram = "./hack/generate"

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
	// place of a released kfsm, through a replace directive. The project
	// names it by its path relative to the project's directory, so that
	// the two move together.
	KFSMPath string
	// KFSMVersion is the kfsm release that the project requires when
	// KFSMPath is empty; it must be a release, such as v0.3.0. kfsm init
	// takes the one it was built with, or --kfsm-version.
	KFSMVersion string
}

// data is what the templates see.
type data struct {
	Module, Group string
	// Name is the project's name, after its first kind (widget-operator):
	// it prefixes the names of the objects it deploys, and names their
	// namespace.
	Name string
	// KFSMVersion is the required version of kfsm; KFSMPath, the
	// checkout's path relative to the project, quoted for go.mod if
	// needed, replaces it.
	KFSMVersion, KFSMPath string
	// KFSMBuild is the line of make kfsm, which builds kfsm's
	// command-line tool into the project's bin directory.
	KFSMBuild           string
	GoVersion           string
	ControllerGen       string
	Kustomize           string
	GoContainerRegistry string
	CertController      string
	// Generate are the steps of make generate, as its lines run them.
	Generate []string
	// The kind at hand: the project's first in the project's own files.
	kind
}

// kind is what the templates see of one kind.
type kind struct {
	Kind, Version string
	// Plural is the resource name, such as widgets; Lower the kind in
	// lower case, the name of the machine and of the files.
	Plural, Lower string
	// Receiver is the receiver name of the kind's methods.
	Receiver string
	// APIImport is the import of the kind's API package: named, where
	// its version looks like a major version suffix (v1, v2), as
	// goimports wants.
	APIImport string
}

// majorVersion is a version that goimports takes for a module's major
// version suffix rather than a package name.
var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

func newKind(module, k, version string) kind {
	lower := strings.ToLower(k)
	apiImport := strconv.Quote(module + "/api/" + version)
	if majorVersion.MatchString(version) {
		apiImport = version + " " + apiImport
	}
	return kind{Kind: k, Version: version, Plural: plural(lower), Lower: lower, Receiver: lower[:1], APIImport: apiImport}
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

// validate lists every problem of p, to be written into dir, and returns
// what the templates see.
func (p Project) validate(dir string) (data, error) {
	if p.Version == "" {
		p.Version = "v1alpha1"
	}
	var problems []error
	if err := checkModulePath(p.Module); err != nil {
		problems = append(problems, err)
	}
	problems = append(problems, checkKind(p.Kind, p.Version)...)
	if err := checkGroup(p.Group); err != nil {
		problems = append(problems, err)
	}
	version, checkout, err := p.kfsm(dir)
	if err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return data{}, errors.Join(problems...)
	}
	d := data{
		Module: p.Module, Group: p.Group, Name: strings.ToLower(p.Kind) + "-operator",
		KFSMVersion: version, KFSMPath: goModPath(checkout), KFSMBuild: kfsmBuild(version, checkout), GoVersion: goVersion,
		ControllerGen: controllerGen, Kustomize: kustomize, GoContainerRegistry: goContainerRegistry, CertController: certController,
		kind: newKind(p.Module, p.Kind, p.Version),
	}
	d.Generate = generateSteps
	return d, nil
}

// kfsmBuild is how a project's Makefile builds kfsm's command-line tool
// into bin/kfsm: the command of the kfsm release that the project
// requires or, with a checkout (a path relative to the project), the
// checkout's own command, built in the checkout's workspace, which joins
// the command's module to the library's. Either runs in the project,
// outside that workspace, and with -trimpath: bin/kfsm names no directory
// of the machine that built it.
func kfsmBuild(version, checkout string) string {
	if checkout == "" {
		return `GOBIN="$(CURDIR)/bin" $(GO) install -trimpath ` + kfsmModule + "/cmd/kfsm@" + version
	}
	return "GOWORK=auto $(GO) -C " + shellWord(checkout) + ` build -trimpath -o "$(CURDIR)/bin/kfsm" ./cmd/kfsm`
}

// goModPath is a directory's path as go.mod writes it: quoted if it holds
// a space or a quote.
func goModPath(dir string) string {
	if strings.ContainsAny(dir, " \t\"'`\\") {
		return strconv.Quote(dir)
	}
	return dir
}

// plainWord is a word that the shell and make take as it is.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./+,:@%=-]+$`)

// shellWord quotes s for the shell, in a Makefile's variable: in single
// quotes unless it is plain, with make's $ doubled and its comment sign
// escaped.
func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.NewReplacer("'", `'\''`, "$", "$$", "#", `\#`).Replace(s) + "'"
}

// generateSteps are the lines of make generate: controller-gen writes the
// deepcopy code, the CRDs and the operator's role, then the project's
// hack/generate what it makes from the machines. kfsm init runs all but
// the first, whose code it renders from a template; kfsm create api runs
// them all.
var generateSteps = []string{
	"$(CONTROLLER_GEN) object paths=./api/...",
	"$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases",
	"$(CONTROLLER_GEN) rbac:roleName=controller paths=./cmd/... paths=./internal/... output:rbac:artifacts:config=config/rbac/operator",
	"$(GO) run " + generateProgram,
}

// checkKind lists the problems of a kind and its version.
func checkKind(k, version string) []error {
	var problems []error
	switch {
	case k == "":
		problems = append(problems, errors.New("kind is empty: name the kind of the resource, such as Widget"))
	case !kindPattern.MatchString(k):
		problems = append(problems, fmt.Errorf("kind %q is not a Go identifier of ASCII letters and digits that starts with an upper-case letter, such as Widget", k))
	case len(k) > maxKind:
		problems = append(problems, fmt.Errorf("kind %q is longer than %d characters", k, maxKind))
	case slices.Contains(reservedKinds, k):
		problems = append(problems, fmt.Errorf("kind %q is taken: the API package declares %s itself", k, k))
	}
	if !versionPattern.MatchString(version) {
		problems = append(problems, fmt.Errorf("version %q is not a Kubernetes API version, such as v1alpha1, v1beta2 or v1", version))
	}
	return problems
}

// kfsm returns the version of kfsm that the project to be written into
// dir requires and the checkout that replaces it, if any, by its path
// relative to dir.
func (p Project) kfsm(dir string) (version, checkout string, err error) {
	if p.KFSMPath == "" {
		if !releasePattern.MatchString(p.KFSMVersion) || pseudoPattern.MatchString(p.KFSMVersion) {
			return "", "", fmt.Errorf("kfsm %s is not a release that a module proxy serves, such as v0.1.0 (a kfsm command built from a checkout knows no release of its own): "+
				"name the release for the project to require with --kfsm-version, or a kfsm checkout for it to use with --kfsm-path", p.KFSMVersion)
		}
		return p.KFSMVersion, "", nil
	}
	mod, err := os.ReadFile(filepath.Join(p.KFSMPath, "go.mod"))
	if err != nil {
		return "", "", fmt.Errorf("kfsm path %s is not a kfsm checkout: %w", p.KFSMPath, err)
	}
	if modulePath(mod) != kfsmModule {
		return "", "", fmt.Errorf("kfsm path %s is not a kfsm checkout: its go.mod is not module %s", p.KFSMPath, kfsmModule)
	}
	if checkout, err = relativePath(dir, p.KFSMPath); err != nil {
		return "", "", fmt.Errorf("kfsm path %s: %w", p.KFSMPath, err)
	}
	// The version a replaced requirement conventionally names.
	return "v0.0.0-00010101000000-000000000000", checkout, nil
}

// relativePath returns the path of target relative to dir, with slashes,
// as go.mod's replace takes a directory: starting with ./ or ../.
func relativePath(dir, target string) (string, error) {
	from, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	to, err := filepath.Abs(target)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(from, to)
	if err != nil {
		return "", fmt.Errorf("no relative path leads from the project %s to it: put them on one volume", dir)
	}
	rel = filepath.ToSlash(rel)
	if rel != ".." && !strings.HasPrefix(rel, "../") {
		rel = "./" + rel
	}
	return rel, nil
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

// file is a template and the path of the file it renders, itself a
// template.
type file struct{ tmpl, path string }

// projectFiles are rendered once, for the project's first kind.
var projectFiles = []file{
	{"gitignore.tmpl", ".gitignore"},
	{"go.mod.tmpl", "go.mod"},
	{"Makefile.tmpl", "Makefile"},
	{"README.md.tmpl", "README.md"},
	{"VERSION.tmpl", "VERSION"},
	{"cmd/main.go.tmpl", "cmd/main.go"},
	{"cmd/main_test.go.tmpl", "cmd/main_test.go"},
	{"cmd/webhooks.go.tmpl", "cmd/webhooks.go"},
	{"controller/suite_test.go.tmpl", "internal/controller/suite_test.go"},
	{"hack/generate.go.tmpl", "hack/generate/main.go"},
	{"hack/image.go.tmpl", "hack/image/main.go"},
	{"hack/run.go.tmpl", "hack/run/main.go"},
	{"hack/run_test.go.tmpl", "hack/run/main_test.go"},
	{"config/crd/kustomization.yaml.tmpl", "config/crd/kustomization.yaml"},
	{"config/rbac/kustomization.yaml.tmpl", "config/rbac/kustomization.yaml"},
	{"config/rbac/service_account.yaml.tmpl", "config/rbac/service_account.yaml"},
	{"config/rbac/role_binding.yaml.tmpl", "config/rbac/role_binding.yaml"},
	{"config/rbac/leader_election_role.yaml.tmpl", "config/rbac/leader_election_role.yaml"},
	{"config/rbac/metrics_reader_role.yaml.tmpl", "config/rbac/metrics_reader_role.yaml"},
	{"config/rbac/webhook_cert_role.yaml.tmpl", "config/rbac/webhook_cert_role.yaml"},
	{"config/manager/kustomization.yaml.tmpl", "config/manager/kustomization.yaml"},
	{"config/manager/manager.yaml.tmpl", "config/manager/manager.yaml"},
	{"config/manager/metrics_service.yaml.tmpl", "config/manager/metrics_service.yaml"},
	{"config/webhook/kustomization.yaml.tmpl", "config/webhook/kustomization.yaml"},
	{"config/webhook/service.yaml.tmpl", "config/webhook/service.yaml"},
	{"config/webhook/secret.yaml.tmpl", "config/webhook/secret.yaml"},
	{"config/default/kustomization.yaml.tmpl", "config/default/kustomization.yaml"},
	{"config/certmanager/kustomization.yaml.tmpl", "config/certmanager/kustomization.yaml"},
	{"config/certmanager/issuer.yaml.tmpl", "config/certmanager/issuer.yaml"},
	{"config/certmanager/certificate.yaml.tmpl", "config/certmanager/certificate.yaml"},
	{"config/prometheus/kustomization.yaml.tmpl", "config/prometheus/kustomization.yaml"},
	{"config/prometheus/monitor.yaml.tmpl", "config/prometheus/monitor.yaml"},
}

// Files renders the files of the project to be written into dir, by
// slash-separated path. Go files are formatted as gofmt does. Complete
// adds go.sum, the CRD, the role, the webhook configurations, the
// Prometheus rules and the machine's graph in its lock.
func (p Project) Files(dir string) (map[string][]byte, error) {
	d, err := p.validate(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	for _, f := range projectFiles {
		name, content, err := renderFile(f, d)
		if err != nil {
			return nil, err
		}
		out[name] = content
	}
	out[recordFile] = record{Name: d.Name, Module: d.Module, Group: d.Group}.marshal()
	if err := addKind(out, d); err != nil {
		return nil, err
	}
	return out, nil
}

// renderFile renders f's path and content. Go files are formatted once a
// kind is added, when their import blocks are whole.
func renderFile(f file, d data) (string, []byte, error) {
	name, err := render(f.path, []byte(f.path), d)
	if err != nil {
		return "", nil, err
	}
	src, err := templates.ReadFile(path.Join("templates", f.tmpl))
	if err != nil {
		return "", nil, err
	}
	content, err := render(f.tmpl, src, d)
	return string(name), content, err
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
	out, err := p.Files(dir)
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
		if err := writeFile(dir, name, out[name]); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes the file of slash-separated path name under dir.
func writeFile(dir, name string, content []byte) error {
	target := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	return os.WriteFile(target, content, 0o644)
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
