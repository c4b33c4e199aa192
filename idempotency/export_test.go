package idempotency

// PurgeBatchForTest sets how many expired keys one purge statement deletes (default 1000), so
// that a test sees a purge of several statements.
func PurgeBatchForTest(n int) Option { return func(o *options) { o.batch = n } }
