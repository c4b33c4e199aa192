package threepc

import "time"

// WithAgentClock sets the clock a PGAgent measures the decision log's outage by, so that a test
// can pass participant.MinLogFallback without waiting for it.
func WithAgentClock(now func() time.Time) AgentOption { return func(o *agentOptions) { o.now = now } }
