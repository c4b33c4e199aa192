package agent

import "time"

// WithClock sets the clock an agent measures the decision log's outage by, so that a test can pass
// MinLogFallback without waiting for it.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithBatch sets how many timed-out branches one statement of an Agent claims, and how many ended
// ones one purge deletes (default 100), so that a test sees a pass of several batches.
func WithBatch(n int) Option { return func(o *options) { o.batch = n } }

// TableForTest sets the name of an Agent's table (default DefaultTable), in its barrier's schema;
// NewPG refuses it.
func TableForTest(name string) Option { return func(o *options) { o.table, o.tableSet = name, true } }
