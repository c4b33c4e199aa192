package twopc

import "errors"

// Sentinel errors of two-phase commit; those every coordinator shares (ErrInvalidState,
// ErrIncomplete, ...) are package coordinator's. Callers match them with [errors.Is].
var (
	// ErrAborted: phase one failed — a participant voted no, failed or did not answer within the
	// prepare timeout — and the transaction was aborted. The error also wraps the branches' errors
	// (*[coordinator.BranchError]; a "no" vote wraps [participant.ErrRefused]).
	ErrAborted = errors.New("twopc: aborted")
	// ErrInDoubt: the decision could not be recorded or read back (the coordinator's database did
	// not answer): the transaction may commit or abort; the recovering leader settles it.
	ErrInDoubt = errors.New("twopc: outcome in doubt")
	// ErrClosed: the Coordinator was closed ([Coordinator.Close]).
	ErrClosed = errors.New("twopc: coordinator closed")
)
