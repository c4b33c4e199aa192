package notify_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuUse adds up the CPU time of this process and of the machine's PostgreSQL server processes
// over measured spans.
type cpuUse struct{ self, pg time.Duration }

// measure starts a span; calling what it returns ends it.
func (c *cpuUse) measure() func() {
	s0, p0 := selfCPU(), postgresCPU()
	return func() {
		c.self += selfCPU() - s0
		c.pg += postgresCPU() - p0
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU is the user and system time of every process named postgres that /proc shows
// (clock ticks taken as 10 ms, the Linux default).
func postgresCPU() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" || end+2 > len(s) {
			continue
		}
		f := strings.Fields(s[end+2:]) // from field 3 (state) on: utime is field 14, stime 15
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + k
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
