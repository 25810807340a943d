//go:build !linux

package cluster

import "syscall"

func componentProcAttr() *syscall.SysProcAttr { return nil }

// diesWithCaller returns path: only Linux has a parent-death signal.
func diesWithCaller(_, path string) (string, error) { return path, nil }

// processGone reports false: a cluster's directory is left alone.
func processGone(int) bool { return false }

// pidNamespace is empty: a cluster's directory is left alone.
func pidNamespace() string { return "" }
