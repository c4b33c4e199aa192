package saga

import "github.com/txkit/txkit/internal/core"

// The statuses of a saga ([coordinator.Status]): running, then succeeded, or compensating →
// compensated.
const (
	StatusRunning      = core.StatusRunning
	StatusSucceeded    = core.StatusSucceeded
	StatusCompensating = core.StatusCompensating
	StatusCompensated  = core.StatusCompensated
)
