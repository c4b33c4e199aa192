package pglock

import "time"

// FallbackCheckForTest sets how often a waiter tries again without having been notified (default
// 1 s); a seam of the tests, not an option of the API.
func FallbackCheckForTest(d time.Duration) Option { return func(o *options) { o.fallback = d } }

// RenewEveryForTest sets how often a holder renews its lease row (default TTL/3).
func RenewEveryForTest(d time.Duration) Option {
	return func(o *options) { o.renew, o.renewSet = d, true }
}

// WaitersForTest returns how many Lock (or Do) calls of c wait for name's release.
func (c *Client) WaitersForTest(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters[name])
}
