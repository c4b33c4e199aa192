package twopc

import "github.com/txkit/txkit/internal/core"

// The statuses of a two-phase commit ([coordinator.Status]), in the core's words: preparing
// (trying), then committing → committed (confirming, confirmed) or aborting → aborted
// (cancelling, cancelled). With [WithVoteMarkers] a transaction of databases is voting while its
// branches prepare, then committed, or committing or aborting when the votes were settled by
// the leader or the starter withdrew.
const (
	StatusVoting     = core.StatusVoting
	StatusPreparing  = core.StatusTrying
	StatusCommitting = core.StatusConfirming
	StatusCommitted  = core.StatusConfirmed
	StatusAborting   = core.StatusCancelling
	StatusAborted    = core.StatusCancelled
)
