package notify

import (
	"context"
	"errors"
	"slices"
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

// Do's background records: a result waits for the linger (an hour here) until max are queued or
// Flush waits; the results queued while a statement is in flight share the next ones (at most max
// each); wait returns once they are all sent and the goroutine has ended.
func TestLaterSharesRecords(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	l := &later{max: 3, linger: time.Hour, kick: make(chan struct{}, 1), flush: func(rs []result) {
		mu.Lock()
		sizes = append(sizes, len(rs))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			entered <- struct{}{}
			<-release // the first statement stays in flight while more results queue
		}
	}}
	for range 3 { // the third fills a statement: sent without waiting for the linger
		l.add(result{})
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("3 results (max) queued: nothing sent")
	}
	for range 4 {
		l.add(result{})
	}
	close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := l.wait(ctx); err != nil {
		t.Fatalf("wait: %v", err)
	}
	l.add(result{}) // lone: lingers until wait hurries it
	if err := l.wait(ctx); err != nil {
		t.Fatalf("wait for a lone result: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{3, 3, 1, 1}; !slices.Equal(sizes, want) {
		t.Errorf("statement sizes %v, want %v", sizes, want)
	}
	if l.idle != nil || len(l.queue) != 0 {
		t.Errorf("after wait: a goroutine running (%v), %d queued", l.idle != nil, len(l.queue))
	}
}
