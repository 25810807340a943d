package kubectlfsm_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kfsm/kfsm/cmd/internal/kubectlfsm"
)

// The shell completes RESOURCE with the resources that machines drive and
// NAME with their objects, read from the cluster, as cobra's __complete
// command answers it.
func TestCompletionReadsTheCluster(t *testing.T) {
	h := newHerd(t)
	all := []string{"moose-01", "moose-02", "moose-03", "moose-04"}
	cases := map[string]struct {
		args []string
		want []string
	}{
		"GetResource":          {[]string{"get", ""}, []string{"moose"}},
		"GraphResourcePrefix":  {[]string{"graph", "mo"}, []string{"moose"}},
		"GraphNoSuchResource":  {[]string{"graph", "elk"}, nil},
		"WatchOneResourceOnly": {[]string{"watch", "moose", ""}, nil},
		"DescribeResource":     {[]string{"describe", ""}, []string{"moose"}},
		"DescribeSlashName":    {[]string{"describe", "moose/moose-0"}, []string{"moose/moose-01", "moose/moose-02", "moose/moose-03", "moose/moose-04"}},
		"WhyNameAfterResource": {[]string{"why", "moose", "moose-03"}, []string{"moose-03"}},
		"RetryNames":           {[]string{"retry", "moose", ""}, all},
		"PauseNothingMore":     {[]string{"pause", "moose/moose-01", ""}, nil},
		"ResumeUnknownKind":    {[]string{"resume", "elk/"}, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, h.complete(t, tc.args...)); diff != "" {
				t.Errorf("__complete %q (-want +got):\n%s", tc.args, diff)
			}
		})
	}
}

// complete runs cobra's __complete command in-process and returns the
// completions it offers.
func (h *herd) complete(t *testing.T, args ...string) []string {
	t.Helper()
	root := kubectlfsm.NewPluginCommand(&kubectlfsm.Options{Now: func() time.Time { return now }})
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(append([]string{"__complete", "--kubeconfig", h.kubeconfig, "-n", h.env.Namespace}, args...))
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("__complete %q: %v", args, err)
	}
	return completions(t, out.String())
}

// completions reads __complete's answer: a completion a line, then the
// directive, which must say that no file names are offered.
func completions(t *testing.T, out string) []string {
	t.Helper()
	var got []string
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(line, ":") {
			if line != ":4" { // cobra.ShellCompDirectiveNoFileComp
				t.Errorf("the directive is %s, want :4 (no file names):\n%s", line, out)
			}
			return got
		}
		got = append(got, line)
	}
	t.Errorf("__complete gave no directive:\n%s", out)
	return got
}
