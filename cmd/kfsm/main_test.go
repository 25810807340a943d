package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

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
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(t.Context(), pw, "demo", "--duration", "5s")
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
	go func() { _, _ = io.Copy(io.Discard, pr) }()

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
}
