package notify_test

import "github.com/txkit/txkit/bench/cpustat"

// measure starts a span of CPU accounting; calling what it returns adds the span's times to acc.
func measure(acc *cpustat.Times) func() {
	t0 := cpustat.Read()
	return func() { *acc = acc.Add(cpustat.Read().Sub(t0)) }
}
