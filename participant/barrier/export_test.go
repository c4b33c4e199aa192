package barrier

import "time"

// SignatureWindowForTest sets how far a signed request's timestamp may be from the clock
// (default [DefaultSignatureWindow]).
func SignatureWindowForTest(d time.Duration) Option { return func(o *options) { o.window = d } }

// MaxRequestBytesForTest sets the largest request body [Barrier.Handler] reads (default 1 MiB).
func MaxRequestBytesForTest(n int64) Option { return func(o *options) { o.maxBody = n } }
