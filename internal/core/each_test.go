package core

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Each calls fn once per index and never more than limit at once (the caller's goroutine
// included).
func TestEach(t *testing.T) {
	for _, tc := range []struct{ n, limit int }{{0, 4}, {1, 4}, {2, 4}, {2, 1}, {7, 3}, {5, 0}, {3, 3}} {
		var (
			mu      sync.Mutex
			calls   = map[int]int{}
			running atomic.Int32
			most    atomic.Int32
		)
		Each(tc.n, tc.limit, func(i int) {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond) // let the others overlap
			running.Add(-1)
			mu.Lock()
			calls[i]++
			mu.Unlock()
		})
		if len(calls) != tc.n {
			t.Errorf("Each(%d, %d) called %d indexes, want %d", tc.n, tc.limit, len(calls), tc.n)
		}
		for i, c := range calls {
			if c != 1 || i < 0 || i >= tc.n {
				t.Errorf("Each(%d, %d): index %d called %d times", tc.n, tc.limit, i, c)
			}
		}
		if limit := max(tc.limit, 1); int(most.Load()) > limit {
			t.Errorf("Each(%d, %d): %d calls at once, want at most %d", tc.n, tc.limit, most.Load(), limit)
		}
		if tc.n >= 3 && tc.limit >= 3 && most.Load() < 2 {
			t.Errorf("Each(%d, %d): the calls never overlapped", tc.n, tc.limit)
		}
	}
}

// With more calls than limit, limit calls run at once from the start: the first limit calls,
// each waiting for all of them to have begun, all begin.
func TestEachFullFromTheStart(t *testing.T) {
	const n, limit = 8, 3
	arrived, all := make(chan struct{}, limit), make(chan struct{})
	go func() {
		for range limit {
			<-arrived
		}
		close(all)
	}()
	var alone atomic.Int32
	Each(n, limit, func(i int) {
		if i >= limit {
			return
		}
		arrived <- struct{}{}
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			alone.Add(1)
		}
	})
	if a := alone.Load(); a > 0 {
		t.Fatalf("Each(%d, %d): %d of the first %d calls waited 5 s for the others to begin", n, limit, a, limit)
	}
}
