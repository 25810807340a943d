//go:build !linux

package main

import "syscall"

func processAttr() *syscall.SysProcAttr { return nil }
