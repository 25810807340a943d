package main

import "syscall"

// processAttr has the kernel kill a controller process if the driver dies
// without stopping it.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
