package core

import (
	"errors"
	"fmt"

	"github.com/txkit/txkit/participant"
)

// Sentinel errors, exported to users by package coordinator (coordinator.ErrNotFound is
// ErrNotFound), so that one value means the same whatever the coordinator: tcc, saga, twopc and threepc
// return errors wrapping these. Callers match them with [errors.Is]; the errors returned wrap
// them with the gid and branch involved. A deposed leader's write fails with an error wrapping
// [lock.ErrFenced].
var (
	// ErrNotFound: no global transaction has the gid.
	ErrNotFound = errors.New("coordinator: transaction not found")
	// ErrInvalidState: the transaction is not in a status that allows the call (see state.go).
	ErrInvalidState = errors.New("coordinator: invalid state")
	// ErrExists: the gid is taken by a transaction already recorded; errors wrapping it also wrap
	// ErrInvalidState.
	ErrExists = errors.New("coordinator: gid exists")
	// ErrInvalidBranch: a branch (a saga's step) is malformed or its name is already used.
	ErrInvalidBranch = errors.New("coordinator: invalid branch")
	// ErrInvalidOption: a constructor or call was given an option or argument it cannot use.
	ErrInvalidOption = errors.New("coordinator: invalid option")
	// ErrIncomplete: the transaction is recorded but not finished; the leader carries it on.
	ErrIncomplete = errors.New("coordinator: not finished; the leader carries on")
	// ErrRunning: Run was called while another Run of the same coordinator is running.
	ErrRunning = errors.New("coordinator: already running")
	// ErrTimeout: the transaction's timeout passed before it was decided.
	ErrTimeout = errors.New("coordinator: timed out")
	// ErrInDoubt: a write of the log may or may not have been made (its ctx ended, or its
	// connection or session was lost, while it was in flight: a failover).
	ErrInDoubt = errors.New("coordinator: outcome in doubt")
)

// PanicError is what a recovered panic becomes: a participant's Do called by [Base.Call], or a
// [Driver], panicked. It is recorded and retried with backoff like any failure: its text
// ("panic: <value>") is the branch's or transaction's last_error; the stack is logged, not kept.
// It does not unwrap to the panic's value, even an error: a panic is an unknown outcome, never a
// refusal.
type PanicError struct {
	Value any // what was passed to panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// BranchError is the error of one branch's operation (exported by package coordinator, which
// documents it).
type BranchError struct {
	GID    string
	Branch string
	Op     participant.Op
	Err    error
}

func (e *BranchError) Error() string {
	noun := "branch"
	if e.Op == participant.OpAction || e.Op == participant.OpCompensate {
		noun = "step"
	}
	return fmt.Sprintf("%s %s: %v", noun, e.Branch, e.Err)
}

// Unwrap returns the participant's error.
func (e *BranchError) Unwrap() error { return e.Err }
