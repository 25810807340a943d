package scaffold

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Init writes and completes a project, as kfsm init does. A machine that
// then gains a Default gets a defaulting webhook, and its configuration:
// make generate writes it beside the validating one, and the project's
// test of the configurations passes.
func TestGenerateWritesTheWebhookConfigurationsOfADefault(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "widget")
	var said, log strings.Builder
	if err := widget(t).Init(t.Context(), dir, &said, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	want := "wrote the Widget operator in " + dir + "; now go mod tidy, controller-gen and hack/webhooks\n" +
		"done: cd " + dir + ", then make test, and make run\n"
	if said.String() != want {
		t.Errorf("Init said %q, want %q", said.String(), want)
	}

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

	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("make", "generate")
	config, err := os.ReadFile(filepath.Join(dir, "config", "webhook", "configuration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: ValidatingWebhookConfiguration\n", "kind: MutatingWebhookConfiguration\n", "path: /kfsm/default/widget\n"} {
		if !strings.Contains(string(config), want) {
			t.Errorf("config/webhook/configuration.yaml lacks %q:\n%s", want, config)
		}
	}
	out := run("go", "test", "-count=1", "-v", "-run", "^TestTheWebhookConfiguration", "./internal/controller")
	if !strings.Contains(out, "--- PASS: TestTheWebhookConfiguration") {
		t.Errorf("the project's test of the webhook configurations did not run:\n%s", out)
	}
}
