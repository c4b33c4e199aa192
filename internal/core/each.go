package core

import (
	"sync"
	"sync/atomic"
)

// Each calls fn for every index below n, in order, at most limit at once, and returns once every
// call returned. The caller's goroutine takes calls too: a phase of n branches starts
// min(n, limit)-1 goroutines, not n, and the caller's stack, already grown, runs its share.
func Each(n, limit int, fn func(i int)) {
	if n <= 0 {
		return
	}
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			fn(i)
		}
	}
	var wg sync.WaitGroup
	for range min(n, max(limit, 1)) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}
