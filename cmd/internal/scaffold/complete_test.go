package scaffold

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The project that Init wrote and completed, once for the tests that read
// it, in dir, below parent; a test that changes it works on a copy.
var completed struct {
	once        sync.Once
	parent, dir string
	err         error
	log         string
	// copy is held by the test that has the one copy of the project.
	copy sync.Mutex
}

func TestMain(m *testing.M) {
	code := m.Run()
	if completed.parent != "" {
		_ = os.RemoveAll(completed.parent)
	}
	os.Exit(code)
}

// project is a copy of the completed Widget project, which Init wrote as
// kfsm init does. The copy is as deep below the same parent as the
// project, so that the path of the kfsm checkout, which the project
// holds relative to itself, leads there from the copy too. Every test's
// copy is in the same directory, one test at a time: the go command keys
// a package it compiles by its directory too, so the project's packages
// that a test leaves as they were come from the build cache, instead of
// being compiled again for each test's make generate and make vet.
func project(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test builds and runs a new project")
	}
	completed.once.Do(func() {
		parent, err := os.MkdirTemp("", "kfsm-scaffold")
		if err != nil {
			completed.err = err
			return
		}
		completed.parent, completed.dir = parent, filepath.Join(parent, "init", "widget")
		var said, log strings.Builder
		completed.err = widget(t).Init(t.Context(), completed.dir, &said, &log)
		completed.log = log.String()
		want := "wrote the Widget operator in " + completed.dir + "; now go mod tidy, controller-gen and hack/generate\n" +
			"done: cd " + completed.dir + ", then make test, and make run\n"
		if completed.err == nil && said.String() != want {
			completed.err = errors.New("Init said " + said.String() + ", want " + want)
		}
		if completed.err == nil {
			// bin/kfsm, which make verify and make vet build, once: the
			// copies find it up to date, instead of linking it again each.
			cmd := exec.Command("make", "kfsm")
			cmd.Dir, cmd.Env = completed.dir, append(os.Environ(), "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				completed.err = fmt.Errorf("make kfsm: %w\n%s", err, out)
			}
		}
	})
	if completed.err != nil {
		t.Fatalf("%v\n%s", completed.err, completed.log)
	}
	completed.copy.Lock()
	copied := filepath.Join(completed.parent, "copy")
	t.Cleanup(func() {
		_ = os.RemoveAll(copied)
		completed.copy.Unlock()
	})
	dir := filepath.Join(copied, "widget")
	if err := os.CopyFS(dir, os.DirFS(completed.dir)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs a command in dir, outside any Go workspace, and returns its
// output; it fails the test if the command fails.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	out, err := command(t, dir, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func command(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test builds and runs a new project")
	}
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A machine that gains a Default gets a defaulting webhook, and its
// configuration: make generate writes it beside the validating one, and
// the project's test of the configurations passes.
func TestGenerateWritesTheWebhookConfigurationsOfADefault(t *testing.T) {
	dir := project(t)
	machine := filepath.Join(dir, "internal", "controller", "widget.go")
	src, err := os.ReadFile(machine)
	if err != nil {
		t.Fatal(err)
	}
	const owns = "\t\tOwns(&corev1.ConfigMap{})\n"
	if !strings.Contains(string(src), owns) {
		t.Fatalf("the machine lacks %q:\n%s", owns, src)
	}
	withDefault := strings.Replace(string(src), owns, "\t\tOwns(&corev1.ConfigMap{}).\n"+
		"\t\tAdmission(fsm.Admission[*v1alpha1.Widget]{Default: func(_ context.Context, w *v1alpha1.Widget) error {\n"+
		"\t\t\tif w.Spec.Data == nil {\n\t\t\t\tw.Spec.Data = map[string]string{}\n\t\t\t}\n\t\t\treturn nil\n\t\t}})\n", 1)
	if err := os.WriteFile(machine, []byte(withDefault), 0o644); err != nil {
		t.Fatal(err)
	}

	run(t, dir, "make", "generate")
	config, err := os.ReadFile(filepath.Join(dir, "config", "webhook", "configuration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: ValidatingWebhookConfiguration\n", "kind: MutatingWebhookConfiguration\n", "path: /kfsm/default/widget\n"} {
		if !strings.Contains(string(config), want) {
			t.Errorf("config/webhook/configuration.yaml lacks %q:\n%s", want, config)
		}
	}
	out := run(t, dir, "go", "test", "-count=1", "-v", "-run", "^TestTheWidgetWebhookConfigurationsAreTheMachines$", "./internal/controller")
	if !strings.Contains(out, "--- PASS: TestTheWidgetWebhookConfigurationsAreTheMachines") {
		t.Errorf("the project's test of the webhook configurations did not run:\n%s", out)
	}
}

// The first thing a project does is to replace kfsm init's sample
// machine with its own: no release has shipped the sample's graph, so
// its lock lets the new graph, with states renamed, added and removed,
// take its place with no migration, and make generate, make verify and
// make vet pass. The lock stays unreleased, and keeps the new graph.
func TestANewProjectReplacesItsSampleMachine(t *testing.T) {
	dir := project(t)
	controller := filepath.Join(dir, "internal", "controller")
	own, err := os.ReadFile(filepath.Join("testdata", "widget.go"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(controller, "widget.go"), own, 0o644); err != nil {
		t.Fatal(err)
	}
	// The sample's tests go with it.
	if err := os.Remove(filepath.Join(controller, "widget_test.go")); err != nil {
		t.Fatal(err)
	}

	run(t, dir, "make", "generate")
	run(t, dir, "make", "verify")
	run(t, dir, "make", "vet")
	lock, err := os.ReadFile(filepath.Join(controller, "widget.graph.lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\n  \"unreleased\": true,\n", `"name": "Provisioning"`} {
		if !strings.Contains(string(lock), want) {
			t.Errorf("the lock lacks %q:\n%s", want, lock)
		}
	}
	if strings.Contains(string(lock), `"name": "Retired"`) {
		t.Errorf("the lock keeps the sample's graph:\n%s", lock)
	}
}

// make vet runs kfsm vet, of the kfsm that the project uses, on the
// project: it passes the project as generated, and reports a handler's
// Next that kfsm would refuse.
func TestMakeVetRunsKFSMVet(t *testing.T) {
	dir := project(t)
	run(t, dir, "make", "vet")

	machine := filepath.Join(dir, "internal", "controller", "widget.go")
	src, err := os.ReadFile(machine)
	if err != nil {
		t.Fatal(err)
	}
	const next = "\treturn fsm.Next(WidgetReady)\n"
	if !strings.Contains(string(src), next) {
		t.Fatalf("the machine lacks %q:\n%s", next, src)
	}
	if err := os.WriteFile(machine, []byte(strings.Replace(string(src), next, "\treturn fsm.Next(WidgetRetired)\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := command(t, dir, "make", "vet")
	if err == nil || !strings.Contains(out, "state Pending asks to move to Retired, which is not among its exits [Ready]") {
		t.Errorf("make vet of a Next that kfsm would refuse: %v, want it reported:\n%s", err, out)
	}
}

// The operator's role, as generated, writes no CRD: it may read its own,
// whose graph make generate wrote there. Its Leases are in a Role of its
// namespace, not in a ClusterRole, and so are the Secrets it may read; it
// writes its own webhook configurations and its own Secret alone, by name.
func TestTheRoleWritesNoCRDAndHoldsLeasesInItsNamespaceOnly(t *testing.T) {
	dir := project(t)
	var clusterRoles []*rbacv1.ClusterRole
	var roles []*rbacv1.Role
	for _, file := range []string{"operator/role.yaml", "webhook/role.yaml", "leader_election_role.yaml", "webhook_cert_role.yaml"} {
		for _, obj := range objects(t, filepath.Join(dir, "config", "rbac", file)) {
			switch o := typed(t, obj).(type) {
			case *rbacv1.ClusterRole:
				clusterRoles = append(clusterRoles, o)
			case *rbacv1.Role:
				roles = append(roles, o)
			}
		}
	}
	checkRoles(t, clusterRoles, roles, "system")

	// The CRD carries the machine's graph.
	crd, err := os.ReadFile(filepath.Join(dir, "config", "crd", "bases", "example.com_widgets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(crd), `graph.kfsm.dev/widget: '{"machine":"widget","resource":{"group":"example.com","version":"v1alpha1","kind":"Widget","resource":"widgets"}`) {
		t.Errorf("the CRD does not carry the widget machine's graph:\n%.1000s", crd)
	}
}

// checkRoles checks that no ClusterRole writes CRDs, writes a webhook
// configuration that it does not name, or holds Leases or Secrets; that a
// Role writes no Secret that it does not name; and that a Role of
// namespace does hold the Leases.
func checkRoles(t *testing.T, clusterRoles []*rbacv1.ClusterRole, roles []*rbacv1.Role, namespace string) {
	t.Helper()
	if len(clusterRoles) == 0 {
		t.Fatal("no ClusterRole")
	}
	readOnly := []string{"get", "list", "watch"}
	writes := func(r rbacv1.PolicyRule) bool {
		return slices.ContainsFunc(r.Verbs, func(verb string) bool { return !slices.Contains(readOnly, verb) })
	}
	for _, cr := range clusterRoles {
		for _, r := range cr.Rules {
			for _, res := range r.Resources {
				if slices.Contains(r.APIGroups, "apiextensions.k8s.io") && (res == "customresourcedefinitions" || res == "*") && writes(r) {
					t.Errorf("ClusterRole %s may %v customresourcedefinitions", cr.Name, r.Verbs)
				}
				if slices.Contains(r.APIGroups, "admissionregistration.k8s.io") && writes(r) && len(r.ResourceNames) == 0 {
					t.Errorf("ClusterRole %s may %v every %s", cr.Name, r.Verbs, res)
				}
				if slices.Contains(r.APIGroups, "coordination.k8s.io") || slices.Contains(r.APIGroups, "") && res == "secrets" {
					t.Errorf("ClusterRole %s holds %s, cluster-wide", cr.Name, res)
				}
			}
		}
	}
	leases := false
	for _, role := range roles {
		for _, r := range role.Rules {
			if role.Namespace == namespace && slices.Contains(r.APIGroups, "coordination.k8s.io") && slices.Contains(r.Resources, "leases") &&
				slices.Contains(r.Verbs, "create") && slices.Contains(r.Verbs, "update") {
				leases = true
			}
			if slices.Contains(r.Resources, "secrets") && writes(r) && len(r.ResourceNames) == 0 {
				t.Errorf("Role %s may %v every Secret of its namespace", role.Name, r.Verbs)
			}
		}
	}
	if !leases {
		t.Errorf("no Role of namespace %s may create and update Leases", namespace)
	}
}

// make build-installer writes everything that make deploy applies into
// one file, with the image pinned; an image without a tag of its own is
// refused.
func TestBuildInstallerWritesThePinnedInstall(t *testing.T) {
	dir := project(t)
	for _, img := range []string{"registry.example.com/widget:latest", "registry.example.com:5000/widget"} {
		if out, err := command(t, dir, "make", "build-installer", "IMG="+img); err == nil || !strings.Contains(out, "pin a version") {
			t.Errorf("make build-installer IMG=%s: %v, want it refused:\n%s", img, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "dist", "install.yaml")); err == nil {
		t.Error("a refused image wrote dist/install.yaml")
	}

	const img = "registry.example.com/widget:v1.2.3"
	run(t, dir, "make", "build-installer", "IMG="+img)
	install := objects(t, filepath.Join(dir, "dist", "install.yaml"))
	var got []string
	for _, obj := range install {
		got = append(got, obj.GetKind()+" "+obj.GetNamespace()+"/"+obj.GetName())
	}
	want := []string{
		"Namespace /widget-operator-system",
		"CustomResourceDefinition /widgets.example.com",
		"ServiceAccount widget-operator-system/widget-operator-controller",
		"Role widget-operator-system/widget-operator-leader-election",
		"Role widget-operator-system/widget-operator-webhook-cert",
		"ClusterRole /widget-operator-controller",
		"ClusterRole /widget-operator-metrics-reader",
		"ClusterRole /widget-operator-webhook-configurations",
		"ClusterRole /widget-operator-widget-editor",
		"ClusterRole /widget-operator-widget-viewer",
		"RoleBinding widget-operator-system/widget-operator-leader-election",
		"RoleBinding widget-operator-system/widget-operator-webhook-cert",
		"ClusterRoleBinding /widget-operator-controller",
		"ClusterRoleBinding /widget-operator-webhook-configurations",
		"Secret widget-operator-system/widget-operator-webhook-cert",
		"Service widget-operator-system/widget-operator-metrics",
		"Service widget-operator-system/widget-operator-webhook",
		"Deployment widget-operator-system/widget-operator-controller",
		"ValidatingWebhookConfiguration /widget-operator-kfsm-validate-widget.widgets.example.com",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dist/install.yaml's objects (-want +got):\n%s", diff)
	}
	data, err := os.ReadFile(filepath.Join(dir, "dist", "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), ":latest") {
		t.Error("dist/install.yaml names an image :latest")
	}

	var clusterRoles []*rbacv1.ClusterRole
	var roles []*rbacv1.Role
	var deployment *appsv1.Deployment
	for _, obj := range install {
		switch o := typed(t, obj).(type) {
		case *rbacv1.ClusterRole:
			clusterRoles = append(clusterRoles, o)
		case *rbacv1.Role:
			roles = append(roles, o)
		case *appsv1.Deployment:
			deployment = o
		}
	}
	checkRoles(t, clusterRoles, roles, "widget-operator-system")
	if deployment == nil {
		t.Fatal("no Deployment")
	}
	pod := deployment.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != img {
		t.Errorf("the operator's image is %s, want %s", c.Image, img)
	}
	switch {
	case pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot:
		t.Error("the pod may run as root")
	case pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != "RuntimeDefault":
		t.Error("the pod's seccomp profile is not RuntimeDefault")
	case c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem:
		t.Error("the operator's root file system is writable")
	case c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation:
		t.Error("the operator may escalate its privileges")
	case c.SecurityContext.Capabilities == nil || !slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Error("the operator keeps capabilities")
	case c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero():
		t.Error("the operator has no resource requests and limits")
	case c.LivenessProbe == nil || c.ReadinessProbe == nil:
		t.Error("the operator has no probes")
	}
}

// The certmanager and prometheus components add what they say, under
// config/default's names; with cert-manager, the operator makes no
// certificate, and has no Secret of its own, nor rights to it.
func TestTheComponentsAddCertManagerAndPrometheus(t *testing.T) {
	dir := project(t)
	file := filepath.Join(dir, "config", "default", "kustomization.yaml")
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	enabled := strings.NewReplacer("# - ../certmanager", "- ../certmanager", "# - ../prometheus", "- ../prometheus").Replace(string(src))
	if enabled == string(src) {
		t.Fatalf("config/default lists no component to uncomment:\n%s", src)
	}
	if err := os.WriteFile(file, []byte(enabled), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "make", "build-installer")
	var kinds []string
	for _, obj := range objects(t, filepath.Join(dir, "dist", "install.yaml")) {
		switch obj.GetKind() {
		case "Issuer", "Certificate", "ServiceMonitor", "PrometheusRule":
			kinds = append(kinds, obj.GetKind()+" "+obj.GetNamespace()+"/"+obj.GetName())
		case "ValidatingWebhookConfiguration":
			if got := obj.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "widget-operator-system/widget-operator-webhook-cert" {
				t.Errorf("the webhook configuration's inject-ca-from is %q", got)
			}
		case "Secret", "Role", "RoleBinding":
			if strings.HasSuffix(obj.GetName(), "-webhook-cert") {
				t.Errorf("with cert-manager, the install holds the %s %s", obj.GetKind(), obj.GetName())
			}
		case "Deployment":
			args := typed(t, obj).(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args
			if args[len(args)-1] != "--webhook-cert-secret=" {
				t.Errorf("with cert-manager, the operator's last argument is %s, want --webhook-cert-secret=", args[len(args)-1])
			}
		}
	}
	want := []string{
		"Certificate widget-operator-system/widget-operator-webhook-cert",
		"Issuer widget-operator-system/widget-operator-selfsigned",
		"PrometheusRule widget-operator-system/widget-operator-kfsm",
		"ServiceMonitor widget-operator-system/widget-operator-metrics",
	}
	slices.Sort(kinds)
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("the components' objects (-want +got):\n%s", diff)
	}
}

// make image writes an image that runs the operator as nonroot, from a
// static binary that links nothing that starts a Kubernetes: no envtest,
// no package cluster.
func TestImageRunsAStaticOperatorAsNonroot(t *testing.T) {
	dir := project(t)
	run(t, dir, "make", "image", "VERSION=v1.2.3")
	img := readImage(t, filepath.Join(dir, "dist", "image.tar"))
	if !slices.Equal(img.tags, []string{"widget-operator:v1.2.3"}) || len(img.layers) != 1 {
		t.Fatalf("the image is %v, of %d layers; want widget-operator:v1.2.3, of one layer", img.tags, len(img.layers))
	}
	if c := img.config; c.OS != "linux" || c.Config.User != "65532:65532" || !slices.Equal(c.Config.Entrypoint, []string{"/operator"}) {
		t.Errorf("the image's config: %+v; want linux, user 65532:65532, entrypoint /operator", c)
	}
	layer := img.layers[0]
	var names []string
	for name := range layer {
		names = append(names, name)
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"etc/", "etc/group", "etc/passwd", "home/", "home/nonroot/", "operator"}, names); diff != "" {
		t.Errorf("the layer's files (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(layer["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd:\n%s", layer["etc/passwd"])
	}
	bin := filepath.Join(t.TempDir(), "operator")
	if err := os.WriteFile(bin, layer["operator"], 0o755); err != nil {
		t.Fatal(err)
	}
	info := run(t, dir, "go", "version", "-m", bin)
	for _, want := range []string{"\tpath\texample.com/widget/cmd\n", "\tbuild\tCGO_ENABLED=0\n", "\tbuild\tGOOS=linux\n", "\tbuild\t-trimpath=true\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("go version -m of the image's operator lacks %q:\n%s", want, info)
		}
	}
}

// image is what a tarball that docker load takes holds of its one image:
// its tags, its config and the files of its layers.
type image struct {
	tags   []string
	config struct {
		OS     string `json:"os"`
		Config struct {
			User       string
			Entrypoint []string
			WorkingDir string
		} `json:"config"`
	}
	layers []map[string][]byte
}

// readImage reads the image of a tarball that docker load takes: its
// manifest.json names the image's config and its gzipped layers.
func readImage(t *testing.T, file string) image {
	t.Helper()
	files := untar(t, file)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 {
		t.Fatalf("%s holds %d images, want one: %s", file, len(manifest), files["manifest.json"])
	}
	img := image{tags: manifest[0].RepoTags}
	if err := json.Unmarshal(files[manifest[0].Config], &img.config); err != nil {
		t.Fatal(err)
	}
	for _, l := range manifest[0].Layers {
		gz, err := gzip.NewReader(bytes.NewReader(files[l]))
		if err != nil {
			t.Fatal(err)
		}
		img.layers = append(img.layers, readTar(t, gz))
	}
	return img
}

// The operator links nothing that starts a Kubernetes: neither envtest
// nor kfsm's package cluster, which make run's hack/run links. Both are
// in modules that the operator needs (controller-runtime, kfsm), so that
// go version -m, which lists modules, cannot tell: the binary's symbols
// name the packages.
func TestTheOperatorLinksNoTestCluster(t *testing.T) {
	dir := project(t)
	unwanted := []string{"sigs.k8s.io/controller-runtime/pkg/envtest", kfsmModule + "/cluster"}
	links := func(pkg string) (info string, packages []string) {
		bin := filepath.Join(t.TempDir(), "bin")
		run(t, dir, "go", "build", "-o", bin, pkg)
		symbols := run(t, dir, "go", "tool", "nm", bin)
		for _, u := range unwanted {
			if strings.Contains(symbols, " "+u+".") {
				packages = append(packages, u)
			}
		}
		return run(t, dir, "go", "version", "-m", bin), packages
	}
	info, packages := links("./cmd")
	if len(packages) > 0 {
		t.Errorf("the operator links %v", packages)
	}
	if !strings.Contains(info, "\tpath\texample.com/widget/cmd\n") {
		t.Errorf("go version -m of the operator:\n%s", info)
	}
	// The check sees them where they are.
	if _, packages := links("./hack/run"); !slices.Equal(packages, unwanted) {
		t.Errorf("hack/run links %v, want %v", packages, unwanted)
	}
}

// objects are the objects of the YAML file.
func objects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if u.Object != nil {
			out = append(out, u)
		}
	}
}

// typed is obj as the API type of its kind, for the kinds that the tests
// look into; other kinds come back as they are.
func typed(t *testing.T, obj *unstructured.Unstructured) any {
	t.Helper()
	var into any
	switch obj.GetKind() {
	case "ClusterRole":
		into = &rbacv1.ClusterRole{}
	case "Role":
		into = &rbacv1.Role{}
	case "Deployment":
		into = &appsv1.Deployment{}
	default:
		return obj
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into); err != nil {
		t.Fatal(err)
	}
	return into
}

// untar reads the files of a tarball.
func untar(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	return readTar(t, f)
}

func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}
