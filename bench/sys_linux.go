package main

import "syscall"

// processAttr puts a controller process in a process group of its own, so
// that a Ctrl-C meant for the driver reaches it only through the driver,
// and has the kernel kill it if the driver dies without stopping it.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// resourceUsage returns the process's user and system CPU time in seconds
// and its peak resident set size in bytes.
func resourceUsage() (cpu float64, maxRSS int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(ru.Utime) + seconds(ru.Stime), ru.Maxrss * 1024 // Linux counts kilobytes
}
