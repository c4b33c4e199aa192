package lock

import (
	"context"
	"time"
)

// pause waits for d; it returns ctx's error when ctx ends first.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Backoff is a pause for retries that would otherwise spin, such as a waiter's attempts while its
// server cannot be reached: Min, doubling up to Max while the failures last, until Reset. Lock
// backends share it. It is not safe for concurrent use; keep one per retry loop.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration
	n        int
}

// Failures returns how many pauses were taken since the last Reset.
func (b *Backoff) Failures() int { return b.n }

// Reset starts again from Min.
func (b *Backoff) Reset() { b.next, b.n = 0, 0 }

// Next counts a failure and returns how long to pause before the next try.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.Min
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	b.n++
	return d
}
