package coretest

import (
	"testing"
	"time"

	"github.com/txkit/txkit/bench/cpustat"
)

// AllocsAtMost runs f once (connections, prepared statements), then counts its allocations with
// testing.AllocsPerRun over runs (every goroutine of the process), logs them with this process's
// processor time per call (a guide, not a bound), and fails t when they exceed max. unit names
// one call of f in the messages ("transfer", "saga").
func AllocsAtMost(t *testing.T, unit string, runs int, max float64, f func()) {
	t.Helper()
	f()
	before := cpustat.Read()
	allocs := testing.AllocsPerRun(runs, f)
	used := cpustat.Read().Sub(before)
	t.Logf("%.0f allocations, %v of this process's processor time per %s", allocs, used.Self/time.Duration(runs+1), unit)
	if allocs > max {
		t.Errorf("%.0f allocations per %s, want at most %.0f", allocs, unit, max)
	}
}
