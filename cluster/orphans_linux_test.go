package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kfsm/kfsm/cluster"
)

// A process that starts a cluster and dies without stopping it, killed or
// ended by go test's timeout, takes etcd and kube-apiserver with it: they
// are not left running, each holding memory and ports, for ever. Its
// directories, the cluster's and a webhook server's certificate's, are
// removed by the next cluster started.
func TestTheClusterDiesWithTheProcessThatStartedIt(t *testing.T) {
	if os.Getenv("KFSM_CLUSTER_HOLDER") != "" {
		holdACluster(t)
		return
	}
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	holder := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestTheClusterDiesWithTheProcessThatStartedIt$")
	tmp := t.TempDir()
	holder.Env = append(os.Environ(), "KFSM_CLUSTER_HOLDER=1", "TMPDIR="+tmp)
	holder.Stderr = os.Stderr
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	lines := bufio.NewScanner(out)
	for len(pids) == 0 && lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "cluster processes:"); ok {
			for _, f := range strings.Fields(rest) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("the holder printed %q", lines.Text())
				}
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) < 2 {
		_ = holder.Process.Kill()
		t.Fatalf("the holder named %d processes of its cluster, want etcd and kube-apiserver", len(pids))
	}
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()

	deadline := time.Now().Add(30 * time.Second)
	for len(alive(pids)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if left := alive(pids); len(left) > 0 {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("30s after the process that started the cluster was killed, its processes still ran: %v", left)
	}
	// etcd's data and the API server's certificates are in the cluster's
	// directory, the webhook server's certificate in one of its own, which
	// the next cluster started removes, their owner gone.
	abandoned := clusterDirs(t, tmp)
	others, _ := filepath.Glob(filepath.Join(tmp, "k8s_test_framework_*"))
	certs, _ := filepath.Glob(filepath.Join(tmp, "envtest-serving-certs-*"))
	if len(abandoned) != 2 || len(others)+len(certs) > 0 {
		t.Fatalf("the killed process left the directories %q and envtest's %q, want two of the cluster package's own", abandoned, append(others, certs...))
	}
	t.Setenv("TMPDIR", tmp)
	c, err := cluster.Start(t.Context(), cluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if dirs := clusterDirs(t, tmp); len(dirs) != 1 || slices.Contains(abandoned, dirs[0]) {
		t.Errorf("with the directories %q of a process that died, the next cluster started left %q", abandoned, dirs)
	}
}

// clusterDirs returns the clusters' directories in dir.
func clusterDirs(t *testing.T, dir string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(dir, "kfsm-cluster-*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// holdACluster starts a cluster and makes a webhook server's certificate,
// prints the process IDs of the cluster's processes and waits to be
// killed.
func holdACluster(t *testing.T) {
	before := childProcesses(t)
	if _, err := cluster.Start(context.Background(), cluster.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.NewWebhookServing(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("cluster processes:", strings.Trim(fmt.Sprint(newProcesses(t, before)), "[]"))
	time.Sleep(time.Hour)
}
