package tcc

import (
	"errors"
	"fmt"

	"github.com/txkit/txkit/internal/core"
	"github.com/txkit/txkit/participant"
)

// Sentinel errors. Callers match them with [errors.Is]. A refused try returns an error wrapping
// [participant.ErrRefused].
var (
	// ErrNotFound: no global transaction has the gid.
	ErrNotFound = errors.New("tcc: transaction not found")
	// ErrInvalidState: the transaction's status does not allow the call (a Try or Commit after
	// the decision, a Commit after the timeout cancelled it, ...).
	ErrInvalidState = errors.New("tcc: invalid state")
	// ErrInvalidBranch: a branch is malformed (empty name, payload that is not JSON, a participant
	// that is neither participant.HTTP nor registered) or its name is already used in the transaction.
	ErrInvalidBranch = errors.New("tcc: invalid branch")
	// ErrInvalidOption: a constructor or call was given an option or argument it cannot use.
	ErrInvalidOption = errors.New("tcc: invalid option")
	// ErrIncomplete: the decision is recorded, but some confirms (or cancels) failed; the
	// recovering leader retries them until they succeed. The outcome is settled: treat it as
	// committed (rolled back) but not yet applied everywhere.
	ErrIncomplete = errors.New("tcc: decided, not yet carried out everywhere")
	// ErrRunning: Run was called while another Run of the same Coordinator is running.
	ErrRunning = errors.New("tcc: already running")
)

// BranchError is the error of one branch's operation: which transaction, which branch, which
// op, and the participant's error (wrapping [participant.ErrRefused] for a refusal).
type BranchError struct {
	GID    string
	Branch string
	Op     participant.Op
	Err    error
}

func (e *BranchError) Error() string {
	return fmt.Sprintf("tcc: %s branch %s of %s: %v", e.Op, e.Branch, e.GID, e.Err)
}

// Unwrap returns the participant's error.
func (e *BranchError) Unwrap() error { return e.Err }

// mapErr puts this package's sentinel in front of the core's, keeping both in the chain.
func mapErr(err error) error {
	return core.Sentinels{NotFound: ErrNotFound, InvalidState: ErrInvalidState, InvalidBranch: ErrInvalidBranch,
		InvalidOption: ErrInvalidOption, Running: ErrRunning}.Map(err)
}
