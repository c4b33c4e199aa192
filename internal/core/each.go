package core

import "golang.org/x/sync/errgroup"

// Each calls fn for every index below n, at most limit at once, the last on the caller's
// goroutine — a phase of n branches starts n-1 goroutines, not n, and its caller's stack, already
// grown, runs the last call — and returns once every call returned.
func Each(n, limit int, fn func(i int)) {
	if n <= 0 {
		return
	}
	if limit <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var eg errgroup.Group
	eg.SetLimit(limit - 1) // the caller's goroutine is the limit's last one
	for i := range n - 1 {
		eg.Go(func() error { fn(i); return nil })
	}
	fn(n - 1)
	_ = eg.Wait()
}
