package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kfsm/kfsm/cluster"
	databasev1 "github.com/kfsm/kfsm/examples/database/v1alpha1"
	"github.com/kfsm/kfsm/fsm"
)

// hostile is text that a terminal would obey: it sets the window title,
// clears the screen, writes the clipboard (OSC 52), forges a line, and
// starts a CSI both as a raw byte and as the C1 character.
const hostile = "\x1b]0;pwned\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \r\nForged: line \x9b31m \u009b31m \x7f\b"

// assertPrintable fails unless out holds no control character but
// newlines and tabs, and no line starts where hostile forges one.
func assertPrintable(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) || strings.ContainsFunc(out, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		t.Errorf("%s printed a control character:\n%q", what, out)
	}
	if regexp.MustCompile(`(?m)^Forged`).MatchString(out) {
		t.Errorf("%s printed a forged line:\n%s", what, out)
	}
}

// run executes the kfsm command with args, writing its standard output to out.
func run(ctx context.Context, out io.Writer, args ...string) error {
	cmd := newRootCommand()
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(io.Discard)
	return cmd.ExecuteContext(ctx)
}

func TestAssetsPrintsTheDirectoryLast(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out, "assets"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dir := lines[len(lines)-1]
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("the printed directory %q holds no executable %s (%v)", dir, name, err)
		}
	}
}

func TestDemoServesUntilItsDurationThenExits(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(t.Context(), pw, "demo", "--duration", "10s")
		_ = pw.Close()
	}()

	sc := bufio.NewScanner(pr)
	var kubeconfig string
	for sc.Scan() {
		if path, ok := strings.CutPrefix(sc.Text(), "kubeconfig: "); ok {
			kubeconfig = path
			break
		}
	}
	if kubeconfig == "" {
		t.Fatalf("the demo printed no kubeconfig line; it returned %v", <-done)
	}
	var rest bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&rest, pr); close(copied) }()

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var namespaces corev1.NamespaceList
	if err := cl.List(t.Context(), &namespaces); err != nil {
		t.Fatalf("listing namespaces with the demo's kubeconfig: %v", err)
	}
	if len(namespaces.Items) == 0 {
		t.Error("the demo's cluster lists no namespaces")
	}

	if err := <-done; err != nil {
		t.Fatalf("demo returned %v, want nil", err)
	}
	if _, err := os.Stat(kubeconfig); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo left its kubeconfig behind: %v", err)
	}
	<-copied
	if !strings.Contains(rest.String(), "moose/moose-01     Tagged    → Roaming   Next") {
		t.Errorf("the demo printed no transition of moose-01 to Roaming:\n%s", rest.String())
	}
}

// With the workloads tier, the web apps become Ready, the moose cycle, the
// managed client is installed and the database runs, with its CloudEvents;
// the demo stops cleanly when interrupted.
func TestDemoWithWorkloadsRunsBothOperators(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, pw, "demo", "--workloads", "--duration", "5m")
		_ = pw.Close()
	}()

	want := map[string]bool{"webapp/shop": false, "webapp/blog": false, "moose eating": false,
		"autoupdate/agent": false, "database/orders": false, "cloudevent": false}
	sc := bufio.NewScanner(pr)
	var kubeconfig string
	for sc.Scan() && slices.Contains(slices.Collect(maps.Values(want)), false) {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "kubeconfig: "):
			kubeconfig = strings.TrimPrefix(line, "kubeconfig: ")
		case strings.Contains(line, "webapp/") && strings.Contains(line, "→ Serving"),
			strings.Contains(line, "autoupdate/agent") && strings.Contains(line, "→ Processed"),
			strings.Contains(line, "database/orders") && strings.Contains(line, "→ Running"):
			want[strings.Fields(line)[1]] = true
		case strings.Contains(line, "moose/") && strings.Contains(line, "→ Eating"):
			want["moose eating"] = true
		case strings.Contains(line, "cloudevent dev.kfsm.transition: default/orders Start → Running"):
			want["cloudevent"] = true
		}
	}
	for what, seen := range want {
		if !seen {
			t.Errorf("the demo never showed %s reaching its state", what)
		}
	}

	// The operators run as their own ServiceAccount, with their webhooks:
	// the cluster's admin may not move a database by hand.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := k8sruntime.NewScheme()
	if err := databasev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	db := &databasev1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "orders"}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"status":{"state":"End"}}`))
	err = admin.Status().Patch(ctx, db, patch)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "written by the operator of machine database only (system:serviceaccount:kfsm-demo:operator)") {
		t.Errorf("a hand edit of the database's status.state: got %v, want it refused by the database's webhook", err)
	}
	interrupt()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err := <-done; err != nil {
		t.Fatalf("interrupted, the demo returned %v, want nil", err)
	}
}

func TestVersionNamesKfsmGoAndKubernetes(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out, "version"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("kfsm %s, built with %s\nkubernetes %s (the embedded cluster)\n", fsm.Version(), runtime.Version(), cluster.KubernetesVersion())
	if out.String() != want {
		t.Errorf("kfsm version printed\n%s\nwant\n%s", out.String(), want)
	}
	if fsm.Version() == "" || fsm.Version() == "unknown" || !strings.HasPrefix(cluster.KubernetesVersion(), "v1.") {
		t.Errorf("versions %q and %q: want kfsm's as Go records it and a Kubernetes release", fsm.Version(), cluster.KubernetesVersion())
	}
}
