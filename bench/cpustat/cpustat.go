// Package cpustat reads the processor time used on this machine — by the calling process, by
// PostgreSQL's processes, by the JVMs (RocketMQ, ZooKeeper) and by the machine as a whole — so
// that a benchmark can say where its time went. It serves this repository's benchmarks only.
//
//	t0 := cpustat.Read()
//	run()
//	d := cpustat.Read().Sub(t0)
//	b.ReportMetric(cpustat.PerOp(d.Postgres, ops), "pg-cpu-ms/op")
package cpustat

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Times is processor time used on this machine so far, read from the kernel (Linux: getrusage
// and /proc): in the calling process, in PostgreSQL's processes, in the JVMs (RocketMQ's name
// server and broker, ZooKeeper), and the machine's busy and total time.
type Times struct {
	Self     time.Duration // this process: user + system
	Postgres time.Duration // every process named "postgres" (backends, WAL writer...; the postmaster's reaped children too)
	JVM      time.Duration // every process named "java"
	Busy     time.Duration // the machine's busy time, summed over its CPUs (/proc/stat: all but idle and iowait)
	Total    time.Duration // the machine's time, summed over its CPUs
}

// Sub returns c − o, field by field.
func (c Times) Sub(o Times) Times {
	return Times{Self: c.Self - o.Self, Postgres: c.Postgres - o.Postgres, JVM: c.JVM - o.JVM, Busy: c.Busy - o.Busy, Total: c.Total - o.Total}
}

// Add returns c + o, field by field.
func (c Times) Add(o Times) Times {
	return Times{Self: c.Self + o.Self, Postgres: c.Postgres + o.Postgres, JVM: c.JVM + o.JVM, Busy: c.Busy + o.Busy, Total: c.Total + o.Total}
}

// userHZ is the unit of /proc's times: USER_HZ, 100 on every Linux architecture Go supports.
const userHZ = 100

const tick = time.Second / userHZ

// Read reads the times now. Where /proc cannot be read (not Linux) only Self is filled.
func Read() Times {
	var c Times
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if stat, err := os.ReadFile("/proc/stat"); err == nil {
		c.Busy, c.Total = machineTimes(stat)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended meanwhile
		}
		name, t, ok := processTimes(b)
		switch {
		case !ok:
		case name == "postgres":
			c.Postgres += t
		case name == "java":
			c.JVM += t
		}
	}
	return c
}

// processTimes parses a /proc/<pid>/stat line: the command name and utime + stime + cutime +
// cstime (fields 14 to 17; the name, field 2, is in parentheses and may hold spaces).
func processTimes(b []byte) (name string, t time.Duration, ok bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	f := strings.Fields(string(b[end+1:])) // from field 3 (state) on
	if len(f) < 15 {
		return "", 0, false
	}
	var sum int64
	for _, s := range f[11:15] { // fields 14..17
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return "", 0, false
		}
		sum += n
	}
	return string(b[open+1 : end]), time.Duration(sum) * tick, true
}

// machineTimes parses /proc/stat's first line ("cpu user nice system idle iowait irq softirq
// steal ..."): the busy time (all but idle and iowait) and the total.
func machineTimes(stat []byte) (busy, total time.Duration) {
	first, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(first))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	var all, idle int64
	for i, s := range f[1:] {
		if i >= 8 { // guest times are counted in user already
			break
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0
		}
		all += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return time.Duration(all-idle) * tick, time.Duration(all) * tick
}

// BusyShare is the share of the machine's processor time that was busy (0..1; 0 when it could not be
// read): near 1, the work measured was bound by the machine's CPUs.
func (c Times) BusyShare() float64 {
	if c.Total <= 0 {
		return 0
	}
	return float64(c.Busy) / float64(c.Total)
}

// PerOp returns d over ops in milliseconds (0 when nothing ran).
func PerOp(d time.Duration, ops int) float64 {
	if ops == 0 {
		return 0
	}
	return float64(d) / float64(time.Millisecond) / float64(ops)
}

// Tree returns the processor time used so far by process pid and its children, those that
// exited included (a PostgreSQL postmaster's: every backend and helper of one server, so one
// server's share when several run on the machine), 0 where /proc cannot be read.
func Tree(pid int) time.Duration {
	var sum time.Duration
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended meanwhile
		}
		self, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if _, t, ok := processTimes(b); ok && (self == pid || Parent(b) == pid) {
			sum += t
		}
	}
	return sum
}

// Parent returns the parent's pid in a /proc/<pid>/stat line (field 4), 0 when it has none.
func Parent(stat []byte) int {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0
	}
	f := strings.Fields(string(stat[end+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
