package inbox

import "time"

// WindowForTest sets how far a delivery's timestamp may be from the receiver's clock (default
// notify.DefaultWindow).
func WindowForTest(d time.Duration) Option { return func(o *options) { o.window = d } }
