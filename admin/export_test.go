package admin

import "time"

// ClockForTest sets the clock that checks signed requests' timestamps (default time.Now); a seam
// of the tests, not an option of the API.
func ClockForTest(now func() time.Time) Option { return func(o *options) { o.now = now } }
