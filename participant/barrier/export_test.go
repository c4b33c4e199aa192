package barrier

// WithPurgeBatch sets how many expired rows one purge statement deletes (default 1000), so that a
// test sees a purge of several statements.
func WithPurgeBatch(n int) Option { return func(o *options) { o.batch = n } }
