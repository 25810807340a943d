//go:build !linux

package main

import "syscall"

func processAttr() *syscall.SysProcAttr { return nil }

// resourceUsage is measured on Linux only.
func resourceUsage() (cpu float64, maxRSS int64) { return 0, 0 }
