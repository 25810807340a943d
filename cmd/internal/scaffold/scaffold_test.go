package scaffold

import (
	"bytes"
	"errors"
	"go/format"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// kfsmCheckout is the checkout this test runs in: three levels up.
func kfsmCheckout(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// relativeCheckout is the path of the kfsm checkout relative to a
// project's directory dir, as the project writes it.
func relativeCheckout(t *testing.T, dir string) string {
	t.Helper()
	rel, err := filepath.Rel(dir, kfsmCheckout(t))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(rel)
}

func widget(t *testing.T) Project {
	return Project{Module: "example.com/widget", Kind: "Widget", Group: "example.com", KFSMPath: kfsmCheckout(t)}
}

// tree lists the files under dir, as slash-separated paths.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// templateText is what a template's action looks like; Go's composite
// literals, such as []T{{...}}, are not.
var templateText = regexp.MustCompile(`\{\{-? *(\.|end\b|range\b|if\b)`)

func TestWriteWritesTheProject(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "widget")
	if err := widget(t).Write(dir); err != nil {
		t.Fatal(err)
	}
	want := []string{
		".gitignore",
		"Makefile",
		"PROJECT",
		"README.md",
		"VERSION",
		"api/v1alpha1/groupversion_info.go",
		"api/v1alpha1/widget_types.go",
		"api/v1alpha1/zz_generated.deepcopy.go",
		"cmd/main.go",
		"cmd/main_test.go",
		"cmd/webhooks.go",
		"config/certmanager/certificate.yaml",
		"config/certmanager/issuer.yaml",
		"config/certmanager/kustomization.yaml",
		"config/crd/kustomization.yaml",
		"config/default/kustomization.yaml",
		"config/manager/kustomization.yaml",
		"config/manager/manager.yaml",
		"config/manager/metrics_service.yaml",
		"config/prometheus/kustomization.yaml",
		"config/prometheus/monitor.yaml",
		"config/rbac/kustomization.yaml",
		"config/rbac/leader_election_role.yaml",
		"config/rbac/metrics_reader_role.yaml",
		"config/rbac/role_binding.yaml",
		"config/rbac/service_account.yaml",
		"config/rbac/webhook_cert_role.yaml",
		"config/rbac/widget_editor_role.yaml",
		"config/rbac/widget_viewer_role.yaml",
		"config/samples/widget.yaml",
		"config/webhook/kustomization.yaml",
		"config/webhook/secret.yaml",
		"config/webhook/service.yaml",
		"go.mod",
		"hack/generate/main.go",
		"hack/image/main.go",
		"hack/run/main.go",
		"hack/run/main_test.go",
		"internal/controller/suite_test.go",
		"internal/controller/widget.go",
		"internal/controller/widget.graph.lock.json",
		"internal/controller/widget_test.go",
	}
	if diff := cmp.Diff(want, tree(t, dir)); diff != "" {
		t.Fatalf("files (-want +got):\n%s", diff)
	}

	for _, name := range want {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if templateText.Match(src) || bytes.Contains(src, []byte("<no value>")) {
			t.Errorf("%s holds template text", name)
		}
		switch {
		case strings.HasSuffix(name, ".go"):
			if _, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments); err != nil {
				t.Errorf("%s does not parse: %v", name, err)
			}
			if formatted, err := format.Source(src); err == nil && !bytes.Equal(formatted, src) {
				t.Errorf("%s is not gofmt'ed", name)
			}
		case strings.HasSuffix(name, "kustomization.yaml"):
			checkYAML(t, name, src, false)
		case strings.HasSuffix(name, ".yaml"):
			checkYAML(t, name, src, true)
		}
	}

	// The names that the kind, group and version make, where they matter.
	for name, wants := range map[string][]string{
		"go.mod": {
			"module example.com/widget\n",
			"require github.com/kfsm/kfsm v0.0.0-00010101000000-000000000000\n",
			"replace github.com/kfsm/kfsm => " + relativeCheckout(t, dir) + "\n",
			"require github.com/google/go-containerregistry " + goContainerRegistry + "\n",
			"require github.com/open-policy-agent/cert-controller " + certController + "\n",
		},
		"PROJECT": {
			"name: widget-operator\nmodule: example.com/widget\ngroup: example.com\nkinds:\n  - kind: Widget\n    version: v1alpha1\n",
		},
		"api/v1alpha1/groupversion_info.go": {
			"package v1alpha1\n",
			"+groupName=example.com\n",
			`schema.GroupVersion{Group: "example.com", Version: "v1alpha1"}`,
			"\t&Widget{}, &WidgetList{},\n",
		},
		"api/v1alpha1/widget_types.go": {
			"+kubebuilder:resource:path=widgets\n",
			"type WidgetStatus struct {\n\tfsm.Status `json:\",inline\"`",
			`+kubebuilder:printcolumn:name="State",type=string,JSONPath=` + "`.status.state`",
			"func (w *Widget) FSMStatus() *fsm.Status { return &w.Status.Status }",
		},
		"internal/controller/widget.go": {
			`fsm.New[*v1alpha1.Widget]("widget", fsm.Lifecycle)`,
			"Goal(widgetGoal).",
			"\"example.com/widget/api/v1alpha1\"\n",
			"type WidgetHandlers struct{}",
			"resources=widgets/status,verbs=patch\n",
			"resourceNames=widgets.example.com,verbs=get\n",
		},
		"internal/controller/widget_test.go": {
			`e.Kubectl("get", "widgets")`,
			"func TestWidgetSurvivesFaults(",
		},
		"internal/controller/suite_test.go": {
			"MinCoverage: 100,",
			`CRDPaths: []string{"../../config/crd/bases"}`,
			`Roles:    []fs.FS{os.DirFS("../../config/rbac/operator")}`,
			"\t\t\tv1alpha1.AddToScheme,\n",
		},
		"cmd/main.go": {
			`if err := setup(mgr, o, shards, &webhooks, v1alpha1.GroupVersion.WithResource("widgets"), (&controller.WidgetHandlers{}).Machine()); err != nil {`,
			"\t\tv1alpha1.AddToScheme,\n",
			"LeaderElectionReleaseOnCancel: true",
			`LeaderElectionID: "widget-operator.example.com"`,
			"fsm.FenceLeaderElection(cfg, &opts", "fsm.LeanCache(&opts)",
			"metrics.FilterProvider = filters.WithAuthenticationAndAuthorization",
			`"metrics-bind-address", ":8443"`, `"metrics-secure", true`, `"enable-http2", false`,
			`"health-probe-bind-address"`, `"leader-elect"`,
			`"leader-election-namespace"`, `"webhook-cert-dir"`, `"webhook-cert-secret", ""`, `"webhook-service", "widget-operator-webhook"`, `"webhook-port"`,
			`"workers", 4,`,
			"resources=tokenreviews,verbs=create\n", "resources=subjectaccessreviews,verbs=create\n",
		},
		"cmd/main_test.go": {
			`l.GetValue() == "widget"`,
			"http.StatusUnauthorized", "http.StatusForbidden",
		},
		"cmd/webhooks.go": {
			`const namePrefix = "widget-operator-"`,
			`CAName:         "widget-operator-webhook-ca"`,
		},
		"hack/generate/main.go": {
			`kindOf((&controller.WidgetHandlers{}).Machine(), v1alpha1.GroupVersion.WithResource("widgets")),`,
			`Namespace: "system", Name: "webhook"`,
			`const namePrefix = "widget-operator-"`,
			"alerts.PrometheusRule",
		},
		"hack/run/main.go": {
			`namespace      = "widget-operator-system"`,
			`serviceAccount = "widget-operator-controller"`,
			`namePrefix     = "widget-operator-"`,
			`"go", "build", "-o", operator, "./cmd"`,
		},
		"hack/image/main.go": {
			`"CGO_ENABLED=0", "GOOS=linux"`,
			"const nonroot = 65532",
		},
		"Makefile": {
			"$(CONTROLLER_GEN) rbac:roleName=controller paths=./cmd/... paths=./internal/... output:rbac:artifacts:config=config/rbac/operator\n",
			"\t$(GO) run ./hack/generate\n",
			"KUSTOMIZE ?= $(GO) run " + kustomize + "\n",
			"\n## verify:", "\nimage: pinned\n", "\nbuild-installer: pinned\n", "\ninstall:\n", "\nuninstall:\n",
			"\ndeploy: pinned\n", "\nundeploy:\n",
			"\nKFSM ?= bin/kfsm\n",
			"\nkfsm:\n\tGOWORK=auto $(GO) -C " + relativeCheckout(t, dir) + " build -trimpath -o \"$(CURDIR)/bin/kfsm\" ./cmd/kfsm\n",
			"\nverify: kfsm\n", "\n\t$(KFSM) check ./...\n",
			"\nvet: kfsm\n\t$(GO) vet ./...\n\t$(KFSM) vet ./...\n",
		},
		"config/crd/kustomization.yaml": {
			"  - bases/example.com_widgets.yaml\n  # +kfsm:scaffold:crds\n",
		},
		"config/rbac/kustomization.yaml": {
			"  - widget_editor_role.yaml\n  - widget_viewer_role.yaml\n  # +kfsm:scaffold:roles\n",
		},
		"config/samples/widget.yaml": {
			"apiVersion: example.com/v1alpha1\nkind: Widget\n",
		},
		"config/default/kustomization.yaml": {
			"namespace: widget-operator-system\n", "namePrefix: widget-operator-\n",
		},
		"config/manager/manager.yaml": {
			"--leader-elect\n",
			"--webhook-cert-dir=",
			"--webhook-cert-secret=widget-operator-webhook-cert\n",
			"name: POD_NAMESPACE\n",
		},
		"config/rbac/webhook_cert_role.yaml": {
			"resourceNames: [widget-operator-webhook-cert]\n",
		},
		"VERSION":    {"v0.1.0\n"},
		".gitignore": {"\n/dist/\n", "\n/bin/\n"},
		"internal/controller/widget.graph.lock.json": {"\"machine\": \"widget\",\n  \"unreleased\": true,\n"},
	} {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			if !strings.Contains(string(src), w) {
				t.Errorf("%s lacks %q", name, w)
			}
		}
	}
}

// A project that moves, or is shared, still builds while the kfsm
// checkout that it uses stays where it was beside it: kfsm init writes
// the checkout's path relative to the project, and no file of the
// project names a directory of the machine that wrote it.
func TestInitWritesNoAbsolutePath(t *testing.T) {
	project(t)
	dir, checkout := completed.dir, kfsmCheckout(t)
	rel := relativeCheckout(t, dir) // ../../work/kfsm holds /work/kfsm
	for _, name := range tree(t, dir) {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		src = bytes.ReplaceAll(src, []byte(rel), nil)
		for _, abs := range []string{checkout, completed.parent} {
			if bytes.Contains(src, []byte(abs)) {
				t.Errorf("%s names %s", name, abs)
			}
		}
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nreplace github.com/kfsm/kfsm => " + relativeCheckout(t, dir) + "\n"; !strings.Contains(string(mod), want) {
		t.Errorf("go.mod lacks %q:\n%s", want, mod)
	}
}

// checkYAML checks that every document of a manifest decodes and, for
// objects, names its kind.
func checkYAML(t *testing.T, name string, src []byte, objects bool) {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(src), 4096)
	docs := 0
	for {
		var u unstructured.Unstructured
		err := d.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if u.Object == nil {
			continue
		}
		docs++
		if u.GetKind() == "" || u.GetAPIVersion() == "" || objects && u.GetName() == "" {
			t.Errorf("%s: document %d has no kind, apiVersion or name", name, docs)
		}
	}
	if docs == 0 {
		t.Errorf("%s holds no object", name)
	}
}

func TestWriteNamesAreTheKinds(t *testing.T) {
	for name, tc := range map[string]struct {
		kind, version, plural, file string
	}{
		"Proxy":   {"Proxy", "v1", "proxies", "internal/controller/proxy.go"},
		"Gateway": {"Gateway", "v2beta1", "gateways", "api/v2beta1/gateway_types.go"},
		"Cache":   {"CacheEntry", "v1alpha1", "cacheentries", "internal/controller/cacheentry_test.go"},
		"Class":   {"Class", "v1", "classes", "api/v1/class_types.go"},
		"Keyword": {"Type", "v1", "types", "internal/controller/type.go"},
	} {
		t.Run(name, func(t *testing.T) {
			p := widget(t)
			p.Kind, p.Version = tc.kind, tc.version
			files, err := p.Files(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := files[tc.file]; !ok {
				t.Errorf("no file %s among %v", tc.file, slices.Sorted(maps.Keys(files)))
			}
			if !bytes.Contains(files["api/"+tc.version+"/"+strings.ToLower(tc.kind)+"_types.go"], []byte("path="+tc.plural+"\n")) {
				t.Errorf("the resource of %s is not %s", tc.kind, tc.plural)
			}
			for name, src := range files {
				if strings.HasSuffix(name, ".go") {
					if _, err := parser.ParseFile(token.NewFileSet(), name, src, 0); err != nil {
						t.Errorf("%s does not parse: %v", name, err)
					}
				}
			}
		})
	}
}

func TestWriteRefusesBadInputAndWritesNothing(t *testing.T) {
	for name, tc := range map[string]struct {
		reason string
		change func(p *Project, dir string)
		want   []string // in the error
	}{
		"KindLowerCase": {
			reason: "A kind is a Go identifier that starts upper-case.",
			change: func(p *Project, _ string) { p.Kind = "widget" },
			want:   []string{`kind "widget"`, "upper-case"},
		},
		"KindNotAnIdentifier": {
			reason: "A kind is a Go identifier.",
			change: func(p *Project, _ string) { p.Kind = "Wid-get" },
			want:   []string{`kind "Wid-get"`, "Go identifier"},
		},
		"KindEmpty": {
			reason: "A kind is needed.",
			change: func(p *Project, _ string) { p.Kind = "" },
			want:   []string{"kind is empty"},
		},
		"KindTaken": {
			reason: "A kind must not collide with what the API package declares.",
			change: func(p *Project, _ string) { p.Kind = "GroupVersion" },
			want:   []string{`kind "GroupVersion" is taken`},
		},
		"GroupWithoutDot": {
			reason: "A CRD's group has a dot.",
			change: func(p *Project, _ string) { p.Group = "example" },
			want:   []string{`group "example" has no dot`},
		},
		"GroupNotDNS": {
			reason: "A group is a DNS subdomain.",
			change: func(p *Project, _ string) { p.Group = "Example_Com.io" },
			want:   []string{`group "Example_Com.io" is not a DNS subdomain`},
		},
		"GroupPartEndsInDash": {
			reason: "Each part of a DNS subdomain ends in a letter or digit.",
			change: func(p *Project, _ string) { p.Group = "example-.com" },
			want:   []string{`group "example-.com" is not a DNS subdomain`},
		},
		"GroupTooLong": {
			reason: "A DNS subdomain has at most 253 characters.",
			change: func(p *Project, _ string) { p.Group = strings.Repeat("a.", 127) + "io" },
			want:   []string{"is not a DNS subdomain", "at most 253"},
		},
		"BadVersion": {
			reason: "A version is a Kubernetes API version.",
			change: func(p *Project, _ string) { p.Version = "1.0" },
			want:   []string{`version "1.0"`},
		},
		"BadModule": {
			reason: "A module path has no empty elements.",
			change: func(p *Project, _ string) { p.Module = "example.com//widget" },
			want:   []string{`module "example.com//widget" is not a Go module path`},
		},
		"NotAKFSMCheckout": {
			reason: "--kfsm-path must be a kfsm checkout.",
			change: func(p *Project, _ string) { p.KFSMPath = os.TempDir() },
			want:   []string{"is not a kfsm checkout"},
		},
		"NoRelease": {
			reason: "Without a checkout, the command's own version must be a release.",
			change: func(p *Project, _ string) { p.KFSMPath, p.KFSMVersion = "", "(devel)" },
			want:   []string{"kfsm (devel) is not a release", "--kfsm-version", "--kfsm-path"},
		},
		"PseudoVersion": {
			reason: "A pseudo-version is not a release.",
			change: func(p *Project, _ string) { p.KFSMPath, p.KFSMVersion = "", "v0.0.0-20260101000000-abcdefabcdef" },
			want:   []string{"is not a release", "--kfsm-version", "--kfsm-path"},
		},
		"DirNotEmpty": {
			reason: "The project goes into a new or empty directory.",
			change: func(_ *Project, dir string) {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					panic(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
					panic(err)
				}
			},
			want: []string{"is not empty", "notes.txt"},
		},
		"Several": {
			reason: "Every problem is listed at once.",
			change: func(p *Project, _ string) { p.Kind, p.Group = "widget", "example" },
			want:   []string{`kind "widget"`, `group "example"`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "widget")
			p := widget(t)
			tc.change(&p, dir)
			before := []string(nil)
			if _, err := os.Stat(dir); err == nil {
				before = tree(t, dir)
			}
			err := p.Write(dir)
			if err == nil {
				t.Fatalf("%s\nWrite succeeded", tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s\nerror %q does not say %q", tc.reason, err, w)
				}
			}
			if before == nil {
				if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s\nWrite made %s: %v", tc.reason, dir, err)
				}
			} else if diff := cmp.Diff(before, tree(t, dir)); diff != "" {
				t.Errorf("%s\nWrite changed %s (-before +after):\n%s", tc.reason, dir, diff)
			}
		})
	}
}

func TestWriteAcceptsAnEmptyDirectoryAndARelease(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := widget(t)
	p.KFSMPath, p.KFSMVersion = "", "v0.3.0"
	if err := p.Write(dir); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "require github.com/kfsm/kfsm v0.3.0\n") || strings.Contains(string(mod), "replace") {
		t.Errorf("go.mod requires no release of kfsm, or replaces it:\n%s", mod)
	}
	makefile, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(makefile), "\nkfsm:\n\tGOBIN=\"$(CURDIR)/bin\" $(GO) install -trimpath github.com/kfsm/kfsm/cmd/kfsm@v0.3.0\n") {
		t.Errorf("the Makefile builds another kfsm command than the release's:\n%s", makefile)
	}
}

func TestShellWord(t *testing.T) {
	for in, want := range map[string]string{
		"/home/me/kfsm/go.work":    "/home/me/kfsm/go.work",
		"/home/me/my kfsm/go.work": `'/home/me/my kfsm/go.work'`,
		"/home/me/it's/go.work":    `'/home/me/it'\''s/go.work'`,
		"/home/$USER/kfsm/go.work": `'/home/$$USER/kfsm/go.work'`,
		"/home/me/`date`/go.work":  "'/home/me/`date`/go.work'",
		"/home/me/a\\b/go.work":    `'/home/me/a\b/go.work'`,
		"/home/me/#1/go.work":      `'/home/me/\#1/go.work'`,
	} {
		if got := shellWord(in); got != want {
			t.Errorf("shellWord(%q) = %s, want %s", in, got, want)
		}
	}
}

// make verify ends with kfsm check, which the Makefile builds from the
// kfsm checkout that the project uses, whatever GOWORK says: it fails, and
// says why, on a machine whose graph has a trap.
func TestMakeVerifyRunsTheModelCheck(t *testing.T) {
	dir := project(t)
	lock := `{"machine": "widget", "graphs": {"1": {"name": "widget", "mode": "Lifecycle",
		"states": [{"name": "Pending", "initial": true}, {"name": "Parked"}, {"name": "Ready", "final": true}],
		"edges": [{"from": "Pending", "to": "Ready", "kind": "exit", "priority": 1}, {"from": "Pending", "to": "Parked", "kind": "exit", "priority": 2},
			{"from": "Parked", "to": "Parked", "kind": "exit"}]}}}`
	if err := os.WriteFile(filepath.Join(dir, "internal", "controller", "widget.graph.lock.json"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	// The check alone: make verify also runs make generate, which needs
	// the module proxy.
	cmd := exec.Command("make", "--no-print-directory", "--eval", "model-check: kfsm ; $(KFSM) check ./...", "model-check")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("kfsm check passed a graph with a trap:\n%s", out)
	}
	for _, want := range []string{
		"internal/controller/widget.graph.lock.json: machine widget, version 1: 1 problem\n",
		"  Trap: state Parked is a trap",
		"    Pending -> Parked, then for ever: Parked -> Parked\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kfsm check printed\n%s\nwithout %q", out, want)
		}
	}
}

// The first make test of a new project builds the Kubernetes binaries.
// That build runs before go test, where its progress reaches the terminal
// as it happens and no test timeout counts it; go test then has a timeout
// of its own, not its default of ten minutes.
func TestMakeTestBuildsTheAssetsBeforeTheTests(t *testing.T) {
	dir := t.TempDir()
	if err := widget(t).Write(dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-n", "test")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, out)
	}
	assets, tests := -1, -1
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "go run "+kfsmModule+"/cluster/assets"):
			assets = i
		case strings.HasPrefix(l, "go test "):
			tests = i
			if !strings.Contains(l, " -timeout ") {
				t.Errorf("go test runs with its default timeout: %s", l)
			}
		}
	}
	if assets < 0 || tests < 0 || assets > tests {
		t.Errorf("make test does not build the assets, then run go test:\n%s", out)
	}
}
