package kubectlfsm_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kfsm/kfsm/cluster"
	"github.com/kfsm/kfsm/cmd/internal/kubectlfsm"
	"github.com/kfsm/kfsm/internal/proctest"
)

// kubectl runs the command as its plugin when kubectl-fsm is on PATH,
// with kubectl's flags: built from cmd/kubectl-fsm, or the kfsm command
// under the plugin's name.
func TestRealKubectlRunsThePlugin(t *testing.T) {
	h, lost := newHerd(t), lostHerd(t)
	assets, err := cluster.EnsureAssets(t.Context(), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("PATH")
	for _, pkg := range []string{"kubectl-fsm", "kfsm"} {
		t.Run(pkg, func(t *testing.T) {
			// On PATH under the plugin's name: kubectl runs it with that
			// name, which is how kfsm knows to be the plugin.
			bin := t.TempDir()
			p := plugin{kubectl: assets.Kubectl(), path: filepath.Join(bin, kubectlfsm.PluginName)}
			if err := os.Symlink(proctest.Build(t, "../../"+pkg), p.path); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", bin+string(os.PathListSeparator)+path)
			p.says(t, h)
			p.namesAsKubectlGet(t, h)
			p.completes(t, h)
			p.whyExits(t, h, lost)
		})
	}
}

// plugin is the built plugin on PATH, and the real kubectl.
type plugin struct {
	kubectl, path string
}

// says runs kubectl fsm's commands through kubectl and reads what they
// print.
func (p plugin) says(t *testing.T, h *herd) {
	t.Helper()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fsm", "graph", "moose"}, "machine moose (examples.kfsm.dev/v1alpha1 Moose, Lifecycle mode)"},
		{[]string{"fsm", "get", "moose"}, "4 objects: Tagged 1, Roaming 1, Eating 1, Sleeping 1"},
		{[]string{"fsm", "describe", "moose/moose-01"}, "│▶ Roaming"},
		{[]string{"fsm", "why", "moose/moose-03"}, "is Stalled in state Eating: RetriesExhausted"},
		{[]string{"fsm", "retry", "moose/moose-03"}, "moose/moose-03 asked to retry"},
		{[]string{"fsm", "demo"}, `unknown command "demo" for "kubectl fsm"`},
		// kubectl's printers, and the wide table.
		{[]string{"fsm", "get", "moose", "-o", "yaml"}, "kind: List\nmetadata:\n  resourceVersion: \"\"\n"},
		{[]string{"fsm", "get", "moose", "-o", "jsonpath={.items[*].status.state}"}, "Roaming Sleeping Eating Tagged"},
		{[]string{"fsm", "get", "moose", "-o", "custom-columns=NAME:.metadata.name,FAILURES:.status.failures"}, "moose-03  3\n"},
		{[]string{"fsm", "get", "moose", "-o", "wide"}, "Waiting           0         upload-track  v1\n"},
		{[]string{"fsm", "get", "moose", "-o", "wide"}, "FAILURES  ACTIONS       GRAPH\n"},
		// kubectl's global flags: impersonation, and the request's time
		// limit.
		{[]string{"fsm", "get", "moose", "--as", "nobody"}, `User "nobody" cannot get resource "customresourcedefinitions"`},
		{[]string{"fsm", "get", "moose", "--as", "nobody", "--as-group", "system:masters"}, "moose-03  Eating"},
		{[]string{"fsm", "get", "moose", "--request-timeout", "1ns"}, "context deadline exceeded"},
		{[]string{"fsm", "get", "moose", "--request-timeout", "30s"}, "moose-03  Eating"},
		{[]string{"fsm", "get", "moose", "--request-timeout", "soon"}, "Invalid timeout value"},
		{[]string{"plugin", "list"}, p.path},
	} {
		// kubectl takes no flags before a plugin's name: they follow it.
		args := append(c.args, h.flags()...)
		if c.args[0] == "plugin" {
			args = c.args
		}
		raw, _ := exec.Command(p.kubectl, args...).CombinedOutput()
		if out := string(raw); !strings.Contains(out, c.want) {
			t.Errorf("kubectl %s:\n%s\nwant it to say %q", strings.Join(c.args, " "), out, c.want)
		}
	}
}

// namesAsKubectlGet checks that -o name prints what kubectl get -o name
// prints.
func (p plugin) namesAsKubectlGet(t *testing.T, h *herd) {
	t.Helper()
	want, err := exec.Command(p.kubectl, append([]string{"get", "moose", "-o", "name"}, h.flags()...)...).Output()
	if err != nil || len(want) == 0 {
		t.Fatalf("kubectl get -o name: %v\n%s", err, want)
	}
	got, err := exec.Command(p.kubectl, append([]string{"fsm", "get", "moose", "-o", "name"}, h.flags()...)...).CombinedOutput()
	if err != nil || string(got) != string(want) {
		t.Errorf("kubectl fsm get -o name: %v\n%s\nwant what kubectl get -o name prints:\n%s", err, got, want)
	}
}

// completes checks that the plugin completes names from the cluster,
// alone and through kubectl, which runs kubectl_complete-fsm with the
// flags that follow fsm.
func (p plugin) completes(t *testing.T, h *herd) {
	t.Helper()
	raw, err := exec.Command(p.path, append(append([]string{"__complete"}, h.flags()...), "why", "moose/moose-0")...).Output()
	if got := completions(t, string(raw)); err != nil || !slices.Contains(got, "moose/moose-03") {
		t.Errorf("kubectl-fsm __complete why moose/moose-0: %v: %q, want moose/moose-03 among them", err, got)
	}
	script := "#!/bin/sh\nexec " + p.path + " __complete \"$@\"\n"
	if err := os.WriteFile(filepath.Join(filepath.Dir(p.path), "kubectl_complete-fsm"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err = exec.Command(p.kubectl, append(append([]string{"__complete", "fsm"}, h.flags()...), "describe", "moose/moose-0")...).Output()
	if got := completions(t, string(raw)); err != nil || !slices.Contains(got, "moose/moose-02") {
		t.Errorf("kubectl __complete fsm describe moose/moose-0: %v: %q, want moose/moose-02 among them", err, got)
	}
}

// whyExits checks that why's exit status reaches the shell, from the
// plugin alone and through kubectl, and that why still explains.
func (p plugin) whyExits(t *testing.T, h, lost *herd) {
	t.Helper()
	for _, c := range []struct {
		on     *herd
		object string
		code   int
		says   string
	}{
		{h, "moose/moose-02", 0, "is Ready"},
		{h, "moose/moose-01", 0, "is not Ready"},
		{h, "moose/moose-03", kubectlfsm.ExitStalled, "is Stalled"},
		{lost, "moose/moose-05", kubectlfsm.ExitStalled, "is Stalled"},
		{lost, "moose/moose-06", kubectlfsm.ExitFailing, "the handler failed 2 times in a row"},
		{h, "moose/moose-04", kubectlfsm.ExitPaused, "is paused"},
		{h, "moose/moose-99", 1, "not found"},
	} {
		for _, run := range [][]string{{p.path}, {p.kubectl, "fsm"}} {
			args := append(append(run[1:], "why", c.object), c.on.flags()...)
			out, err := exec.Command(run[0], args...).CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code || !strings.Contains(string(out), c.says) {
				t.Errorf("%s why %s: exit status %d, want %d; it says\n%s\nwant it to say %q", filepath.Base(run[0]), c.object, code, c.code, out, c.says)
			}
		}
	}
}

// flags are the flags that name the herd's cluster and namespace.
func (h *herd) flags() []string {
	return []string{"--kubeconfig", h.kubeconfig, "-n", h.env.Namespace}
}
