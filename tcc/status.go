package tcc

import "github.com/txkit/txkit/internal/core"

// The statuses of a TCC transaction ([coordinator.Status]): trying, then confirming → confirmed
// or cancelling → cancelled.
const (
	StatusTrying     = core.StatusTrying
	StatusConfirming = core.StatusConfirming
	StatusConfirmed  = core.StatusConfirmed
	StatusCancelling = core.StatusCancelling
	StatusCancelled  = core.StatusCancelled
)
