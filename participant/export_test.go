package participant

import "time"

// WithAgentClock sets the clock an Agent measures the decision log's outage by, so that a test
// can pass MinLogFallback without waiting for it.
func WithAgentClock(now func() time.Time) AgentOption { return func(o *agentOptions) { o.now = now } }
