package rocketmq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The first send of a topic goes alone: sends that come meanwhile wait for it, then go at once,
// concurrently; another topic is not held up; a waiter's ctx ends its wait.
func TestFirstSends(t *testing.T) {
	var f firstSends
	release := make(chan struct{})
	var inFirst, running, most atomic.Int32
	send := func(first bool) func() error {
		return func() error {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			if first {
				inFirst.Add(1)
				<-release
			}
			time.Sleep(10 * time.Millisecond)
			return nil
		}
	}
	ctx := context.Background()
	firstDone := make(chan error, 1)
	go func() { firstDone <- f.do(ctx, "a", send(true)) }()
	for inFirst.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Another topic goes while a's first send is in flight.
	if err := f.do(ctx, "b", send(false)); err != nil {
		t.Fatal(err)
	}
	// A waiter whose ctx ends gives up with its error.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := f.do(short, "a", send(false)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiter past its deadline = %v, want context.DeadlineExceeded", err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := f.do(ctx, "a", send(false)); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(30 * time.Millisecond)
	if n := running.Load(); n != 1 {
		t.Fatalf("%d sends running while a's first is in flight, want just it", n)
	}
	most.Store(0)
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if most.Load() < 2 {
		t.Fatalf("the later sends of a ran one at a time (at most %d at once)", most.Load())
	}
}
