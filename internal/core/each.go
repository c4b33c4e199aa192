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
	if n == 1 || limit <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	// One allocation for the shared state; the goroutines run its method.
	e := &eachRun{n: n, fn: fn}
	for range min(n, limit) - 1 {
		e.wg.Go(e.work)
	}
	e.work()
	e.wg.Wait()
}

// eachRun is one Each: its calls take the indexes in turn.
type eachRun struct {
	next atomic.Int64
	n    int
	fn   func(i int)
	wg   sync.WaitGroup
}

func (e *eachRun) work() {
	for i := int(e.next.Add(1) - 1); i < e.n; i = int(e.next.Add(1) - 1) {
		e.fn(i)
	}
}
