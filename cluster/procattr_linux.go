package cluster

import "syscall"

// componentProcAttr puts a component in its own process group, so that a
// Ctrl-C meant for the caller does not stop it behind the caller's back, and
// has the kernel kill it if the caller dies without stopping it.
func componentProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
