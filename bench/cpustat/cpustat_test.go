package cpustat

import (
	"os"
	"runtime"
	"testing"
	"time"
)

func TestProcessTimes(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     string
		d        time.Duration
		ok       bool
	}{
		{"postgres backend", "4242 (postgres) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 1 0 100 0 0", "postgres", 2 * time.Second, true},
		{"reaped children count", "1 (postgres) S 0 1 1 0 -1 0 0 0 0 0 10 10 30 50 20 0 1 0 100 0 0", "postgres", time.Second, true},
		{"a name with spaces and parentheses", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0", "a (b) c", 100 * time.Millisecond, true},
		{"truncated", "7 (java) R 1 7", "", 0, false},
		{"not a number", "7 (java) R 1 7 7 0 -1 0 0 0 0 0 x 2 3 4 20 0 1 0", "", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			name, d, ok := processTimes([]byte(c.in))
			if ok != c.ok || name != c.want || d != c.d {
				t.Fatalf("processTimes = %q, %v, %v; want %q, %v, %v", name, d, ok, c.want, c.d, c.ok)
			}
		})
	}
}

func TestMachineTimes(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	busy, total := machineTimes([]byte("cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 1 2 3 4\n"))
	if busy != 1500*time.Millisecond || total != 10*time.Second {
		t.Fatalf("machineTimes = %v, %v; want 1.5s, 10s", busy, total)
	}
	if b, tot := machineTimes([]byte("intr 1 2 3")); b != 0 || tot != 0 {
		t.Fatalf("a line that is not cpu: %v, %v", b, tot)
	}
}

// Read sees this process's own work, and (on Linux) the machine's time passing.
func TestRead(t *testing.T) {
	c0 := Read()
	deadline := time.Now().Add(100 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	d := Read().Sub(c0)
	if d.Self < 50*time.Millisecond {
		t.Fatalf("100 ms of spinning counted %v of this process's CPU", d.Self)
	}
	if _, err := os.Stat("/proc/stat"); err == nil && runtime.GOOS == "linux" && (d.Total <= 0 || d.Busy <= 0 || d.Busy > d.Total) {
		t.Fatalf("machine times %v busy of %v", d.Busy, d.Total)
	}
}
