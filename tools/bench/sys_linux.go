package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// processAttr puts a controller process in a process group of its own, so
// that a Ctrl-C meant for the driver reaches it only through the driver,
// and has the kernel kill it if the driver dies without stopping it.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// resourceUsage returns the process's user and system CPU time in seconds
// and its peak resident set size in bytes.
//
// The peak is the kernel's VmHWM, not getrusage's ru_maxrss: a process
// started from another inherits the larger of the two's peaks in
// ru_maxrss, which would report the driver's peak for a controller that
// used less.
func resourceUsage() (cpu float64, maxRSS int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(ru.Utime) + seconds(ru.Stime), peakRSS()
}

// peakRSS returns the process's VmHWM in bytes, or 0 if it cannot be read.
func peakRSS() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}
