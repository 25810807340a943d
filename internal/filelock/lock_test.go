//go:build unix

package filelock

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The helper process of TestALockHeldByAnotherProcess: it takes the lock
// named by FILELOCK_HOLD, says so, and holds it until its stdin closes
// or it is killed.
func TestMain(m *testing.M) {
	if path := os.Getenv("FILELOCK_HOLD"); path != "" {
		if _, err := Lock(context.Background(), path, func() {}); err != nil {
			_, _ = os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		_, _ = os.Stdout.WriteString("held\n")
		buf := make([]byte, 1)
		_, _ = os.Stdin.Read(buf)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A second Lock of a held path waits, saying so once, until the first is
// unlocked; one that gives up returns its context's error.
func TestASecondLockWaitsForTheFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.lock")
	unlock, err := Lock(t.Context(), path, func() { t.Error("the first Lock waited") })
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	waited := 0
	if _, err := Lock(ctx, path, func() { waited++ }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Lock of a held path that gave up returned %v, want its context's deadline", err)
	}
	if waited != 1 {
		t.Errorf("waiting was called %d times, want once", waited)
	}

	got := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		unlock2, err := Lock(t.Context(), path, func() { close(waiting) })
		if err == nil {
			unlock2()
		}
		got <- err
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the second Lock of a held path did not say it was waiting within 10 s")
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the second Lock after the unlock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second Lock did not take the lock within 10 s of the unlock")
	}
}

// The lock is between processes, and the kernel drops it when its holder
// dies: a killed holder blocks nobody.
func TestALockHeldByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.lock")
	holder := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), "FILELOCK_HOLD="+path)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close() }()
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 64)
	n, _ := stdout.Read(line)
	if strings.TrimSpace(string(line[:n])) != "held" {
		t.Fatalf("the holder said %q, want held", line[:n])
	}

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, path, func() {}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a path another process holds returned %v, want its context's deadline", err)
	}

	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	unlock, err := Lock(ctx, path, func() {})
	if err != nil {
		t.Fatalf("Lock after its holder was killed: %v", err)
	}
	unlock()
}

// A path whose directory does not exist is an error that says so.
func TestLockOfAPathThatCannotBeOpened(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "cache.lock")
	if _, err := Lock(t.Context(), path, func() {}); err == nil || !strings.Contains(err.Error(), "opening lock file") {
		t.Errorf("Lock(%s) = %v, want an error opening the lock file", path, err)
	}
}
