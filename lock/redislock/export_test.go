package redislock

import "time"

// Seams of the tests, not options of the API.

// FallbackCheckForTest sets the longest a waiter waits for a release message (default 1 s).
func FallbackCheckForTest(d time.Duration) Option { return func(o *options) { o.fallback = d } }

// RenewEveryForTest sets how often the watchdog renews a hold (default TTL/3).
func RenewEveryForTest(d time.Duration) Option {
	return func(o *options) { o.renewEvery, o.renewSet = d, true }
}

// ClockDriftForTest sets the clock drift allowance (default 1% of the TTL + 2 ms).
func ClockDriftForTest(d time.Duration) Option {
	return func(o *options) { o.drift, o.driftSet = d, true }
}
