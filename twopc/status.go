package twopc

import "github.com/txkit/txkit/internal/core"

// The statuses of a two-phase commit ([coordinator.Status]), in the core's words: preparing
// (trying), then committing → committed (confirming, confirmed) or aborting → aborted
// (cancelling, cancelled).
const (
	StatusPreparing  = core.StatusTrying
	StatusCommitting = core.StatusConfirming
	StatusCommitted  = core.StatusConfirmed
	StatusAborting   = core.StatusCancelling
	StatusAborted    = core.StatusCancelled
)
