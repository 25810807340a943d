package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kfsm/kfsm/cluster"
)

// A process that starts a cluster and dies without stopping it, killed or
// ended by go test's timeout, takes etcd and kube-apiserver with it: they
// are not left running, each holding memory and ports, for ever.
func TestTheClusterDiesWithTheProcessThatStartedIt(t *testing.T) {
	if os.Getenv("KFSM_CLUSTER_HOLDER") != "" {
		holdACluster(t)
		return
	}
	if testing.Short() {
		t.Skip("-short: this test starts an API server")
	}
	holder := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestTheClusterDiesWithTheProcessThatStartedIt$")
	holder.Env = append(os.Environ(), "KFSM_CLUSTER_HOLDER=1")
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
}

// holdACluster starts a cluster, prints the process IDs of its processes
// and waits to be killed.
func holdACluster(t *testing.T) {
	before := childProcesses(t)
	if _, err := cluster.Start(context.Background(), cluster.Options{}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("cluster processes:", strings.Trim(fmt.Sprint(newProcesses(t, before)), "[]"))
	time.Sleep(time.Hour)
}
