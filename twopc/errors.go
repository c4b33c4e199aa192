package twopc

import (
	"errors"
	"fmt"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/participant"
)

// Sentinel errors. Callers match them with [errors.Is].
var (
	// ErrNotFound: no global transaction has the gid.
	ErrNotFound = errors.New("twopc: transaction not found")
	// ErrInvalidState: the transaction's status does not allow the call (an Enlist after Commit,
	// a Commit after Abort, a Commit after the leader aborted it at its timeout, ...).
	ErrInvalidState = errors.New("twopc: invalid state")
	// ErrInvalidBranch: a branch is malformed (empty or over-long name, a name with a backslash or
	// a control character, a database that is not registered, a payload that is not JSON, a
	// participant that cannot be recorded) or its name is already enlisted in the transaction.
	ErrInvalidBranch = errors.New("twopc: invalid branch")
	// ErrInvalidOption: a constructor or call was given an option or argument it cannot use (among
	// them a gid, database name, schema or table prefix with a backslash or a control character).
	ErrInvalidOption = errors.New("twopc: invalid option")
	// ErrAborted: phase one failed — a participant voted no, failed or did not answer within the
	// prepare timeout — and the transaction was aborted. The error also wraps the branches' errors
	// (*BranchError; a "no" vote wraps [participant.ErrRefused]).
	ErrAborted = errors.New("twopc: aborted")
	// ErrIncomplete: the decision is recorded, but phase two did not finish on every participant;
	// the recovering leader finishes it. The outcome is settled: treat it as committed (aborted).
	ErrIncomplete = errors.New("twopc: decided, not yet carried out everywhere")
	// ErrInDoubt: the decision could not be recorded or read back (the coordinator's database did
	// not answer): the transaction may commit or abort; the recovering leader settles it.
	ErrInDoubt = errors.New("twopc: outcome in doubt")
	// ErrClosed: the Coordinator was closed ([Coordinator.Close]).
	ErrClosed = errors.New("twopc: coordinator closed")
	// ErrRunning: Run was called while another Run of the same Coordinator is running.
	ErrRunning = errors.New("twopc: already running")
)

// BranchError is the error of one branch's operation: which transaction, which branch, which op
// (prepare, commit, abort), and the participant's error.
type BranchError struct {
	GID    string
	Branch string
	Op     participant.Op
	Err    error
}

func (e *BranchError) Error() string {
	return fmt.Sprintf("twopc: %s branch %s of %s: %v", e.Op, e.Branch, e.GID, e.Err)
}

// Unwrap returns the participant's error.
func (e *BranchError) Unwrap() error { return e.Err }

// mapErr puts this package's sentinel in front of the core's, keeping both in the chain.
func mapErr(err error) error {
	return core.Sentinels{NotFound: ErrNotFound, InvalidState: ErrInvalidState, InvalidBranch: ErrInvalidBranch,
		InvalidOption: ErrInvalidOption, Running: ErrRunning}.Map(err)
}
