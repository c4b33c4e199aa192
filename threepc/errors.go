package threepc

import "errors"

// Sentinel errors of three-phase commit; those every coordinator shares (ErrInvalidState,
// ErrIncomplete, ...) are package coordinator's. Callers match them with [errors.Is].
var (
	// ErrAborted: the transaction was aborted — a branch voted no at CanCommit (the error then
	// wraps [participant.ErrRefused]), failed or did not answer within its phase's timeout (it
	// wraps [ErrPhaseTimeout]), or a participant's agent, its timeout passed, recorded the abort
	// in the log first. The branches' errors are joined to it as *[coordinator.BranchError]s.
	ErrAborted = errors.New("threepc: aborted")
	// ErrPhaseTimeout: a branch did not answer CanCommit or PreCommit within the phase's timeout
	// ([WithTimeouts]); a timeout shorter than the round trip to the participants aborts every
	// transaction with it.
	ErrPhaseTimeout = errors.New("threepc: phase timed out")
	// ErrInDoubt: the decision could not be recorded or read back (the log's database did not
	// answer): the transaction may commit or abort; the participants' agents and the recovering
	// leader settle it.
	ErrInDoubt = errors.New("threepc: outcome in doubt")
	// ErrClosed: the Coordinator was closed ([Coordinator.Close]).
	ErrClosed = errors.New("threepc: coordinator closed")
)
