package threepc

import "github.com/txkit/txkit/internal/core"

// The statuses of a three-phase commit ([coordinator.Status]), in the core's words: pre-committing
// (trying: recorded after every branch voted yes at CanCommit, while PreCommit runs), then
// committing → committed (confirming, confirmed) or aborting → aborted (cancelling, cancelled). A
// transaction refused at CanCommit is never recorded.
const (
	StatusPreCommitting = core.StatusTrying
	StatusCommitting    = core.StatusConfirming
	StatusCommitted     = core.StatusConfirmed
	StatusAborting      = core.StatusCancelling
	StatusAborted       = core.StatusCancelled
)
