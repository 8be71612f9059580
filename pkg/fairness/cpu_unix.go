//go:build unix

package fairness

import (
	"syscall"
	"time"
)

// processCPU is the CPU time, user and system, all the process's threads
// have used.
func processCPU() (time.Duration, bool) {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0, false
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano()), true
}
