package notify

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// A lone call flushes its item alone at once; calls arriving while a flush is in flight share the
// next one (at most max items each), and each gets its own result or the flush's error.
func TestGroupedSharesFlushes(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	hold := false // the next flush stays in flight until release
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	g := &grouped[int, int]{max: 4, flush: func(items []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(items))
		first := hold
		hold = false
		mu.Unlock()
		if first {
			entered <- struct{}{}
			<-release // the first flush stays in flight while the others queue
		}
		if items[0] < 0 {
			return nil, errors.New("refused")
		}
		out := make([]int, len(items))
		for i, it := range items {
			out[i] = 10 * it
		}
		return out, nil
	}}
	if r, err := g.do(-1); err == nil {
		t.Fatalf("a refused flush returned %d, nil", r)
	}
	mu.Lock()
	sizes, hold = nil, true
	mu.Unlock()

	results := make([]int, 10)
	var wg sync.WaitGroup
	wg.Go(func() { results[0], _ = g.do(0) })
	<-entered
	for i := 1; i < len(results); i++ {
		wg.Go(func() { results[i], _ = g.do(i) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		queued := len(g.queue)
		g.mu.Unlock()
		if queued == len(results)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued, len(results)-1)
		}
		time.Sleep(time.Millisecond) // polling for the condition, with a deadline
	}
	close(release)
	wg.Wait()
	for i, r := range results {
		if r != 10*i {
			t.Errorf("call %d got %d, want %d", i, r, 10*i)
		}
	}
	if want := []int{1, 4, 4, 1}; len(sizes) != len(want) || sizes[0] != 1 || sizes[1] != 4 || sizes[2] != 4 || sizes[3] != 1 {
		t.Errorf("flush sizes %v, want %v: the first alone, then the queued ones at most 4 at a time", sizes, want)
	}
	if g.busy || len(g.queue) != 0 {
		t.Errorf("after the calls: busy %v, %d queued", g.busy, len(g.queue))
	}
}
