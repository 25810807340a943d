package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// componentProcAttr puts a component in its own process group, so that a
// Ctrl-C meant for the caller does not stop it behind the caller's back, and
// has the kernel kill it if the caller dies without stopping it.
func componentProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// diesWithCaller returns the path of an executable that runs the binary at
// path, with its arguments, as a process that the kernel kills when the
// caller dies, as componentProcAttr has it for the workloads' components.
// envtest, which starts etcd and kube-apiserver, sets no such signal, and
// a test binary killed, or ended by go test's timeout, would leave them
// running for ever. The executable is a script in dir that has setpriv
// (util-linux) set the signal and run the binary in its place, so the
// process envtest stops is the binary's. Without setpriv it is path.
func diesWithCaller(dir, path string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if errors.Is(err, exec.ErrNotFound) {
		return path, nil
	}
	if err != nil {
		return "", fmt.Errorf("looking for setpriv: %w", err)
	}
	script := filepath.Join(dir, filepath.Base(path))
	body := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", shellQuote(setpriv), shellQuote(path))
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		return "", fmt.Errorf("writing the script that runs %s: %w", filepath.Base(path), err)
	}
	return script, nil
}

// shellQuote quotes s as one word of sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// processGone reports whether no process has the ID pid.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// pidNamespace names this process's process ID namespace.
func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return ns
}
