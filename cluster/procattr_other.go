//go:build !linux

package cluster

import "syscall"

func componentProcAttr() *syscall.SysProcAttr { return nil }
